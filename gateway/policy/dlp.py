"""Outbound data-loss prevention: the detectors that look for secrets in what an agent sends.

Pure: text in, a `Finding` (or None) out. What is looked at (step 2b of a decision, before any
name is resolved): every host label, path segment and query value of a URL, a search query,
a proxied request's header values and body prefix, a CONNECT host. Each piece is read as
written, percent-decoded, folded when it is not ASCII (`fold`: NFKC, so fullwidth and other
compatibility letters read as the ASCII the parser maps them to, without default-ignorable
code points), and, where it holds a long base64 or hex run, decoded from that too (bytes that
are not printable read as line breaks, hex at both nibble pairings), so `%41KIA…`, `ＡＫＩＡ…`,
`QUtJQ…` (base64) and `414b4941…` (hex) are caught like `AKIA…`. A URL is read as the parser
reads it (the whitespace around it stripped), and its host also as dialled (`scan_url`'s
`dialled_host`: UTS 46, A-labels, lower case), where canaries and AWS key ids count in any case.

Detectors:
- known secret formats, each named (`BUILTIN_DETECTORS`), each on unless the policy turns it
  off;
- `entropy`: a run of at least `min_length` characters of a token alphabet holding a letter
  and a digit, whose Shannon entropy is at least `min_bits_per_char` (read against base64's
  6 bits per character: a run of hex digits is held to 4/6 of it, one of base32 to 5/6, each
  alphabet to the same share of its own maximum); by default in host labels only (real paths
  and queries carry many random tracking ids);
- `canary`: operator-provided strings that must never leave;
- custom patterns (RE2 syntax, compiled with RE2, so no pattern can backtrack).

A finding never holds the secret: it names the detector, where it was (`location`: a host
label index, a path segment index, a query parameter or header name, `body`, a search
query) and an HMAC fingerprint of the match under the settings' `fingerprint_key` (the
composition root gives every policy the gateway configuration's key, or one random key per
process start), so records of one secret can be correlated without revealing it. What the
audit log shows of a request once DLP has looked is `dlprecords.py`'s.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import math
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

import re2


class DlpMode(StrEnum):
    OFF = "off"
    REPORT = "report"
    ENFORCE = "enforce"


ENTROPY = "entropy"
CANARY = "canary"
UNTRUSTED_HOST = "untrusted_host"
ENTROPY_WHERE = ("host_labels", "path", "query")
MIN_CANARY_LENGTH = 8
MAX_CANARIES = 10_000
MAX_PATTERNS = 100
DEFAULT_BODY_PREFIX = 65_536  # of a proxied request's body
MAX_BODY_PREFIX = 1 << 20
MAX_SCANNED_CHARS = 1 << 20  # one piece (a header value, a body prefix) is read up to here


def _openai_shaped(token: str) -> bool:
    # `sk-` starts many words and slugs (`sk-hynix-results`); a key's body mixes cases and
    # digits, where a slug is lower case. Any part may be the body: text may follow a key.
    parts = token.split("-")[1:] if token.startswith("sk-") else [token]
    return any(_mixed(body) or len(body) >= 40 and any(c.isdigit() for c in body) for body in parts)


def _mixed(text: str) -> bool:
    return (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
    )


def _basic_pair(token: str) -> bool:
    """`Basic <base64>` whose decoding is a printable `user:password`."""
    encoded = token.split()[-1]
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    text = decoded.decode("utf-8", "replace")
    return ":" in text and text.isprintable()


@dataclass(frozen=True, slots=True)
class Detector:
    """A known secret format: a regular expression, and a check on each match that weeds out
    look-alikes the expression alone cannot."""

    name: str
    regex: str
    description: str
    check: Callable[[str], bool] | None = None
    # Literals every match contains: the cheap first look (and their base64 and hex forms).
    anchors: tuple[str, ...] = ()


# Each starts at a token boundary (never inside a longer word or id), which also keeps a
# search linear. Python's `re` runs these fixed expressions; custom ones run on RE2.
_B = r"(?<![A-Za-z0-9_])"
_E = r"(?![A-Za-z0-9_])"
BUILTIN_DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "aws_access_key",
            _B + r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[0-9A-Z]{16}" + _E,
            "AWS access key ids (AKIA…, ASIA…)",
            anchors=("AKIA", "ASIA", "ABIA", "ACCA", "AIDA", "AROA"),
        ),
        Detector(
            "github_token",
            _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})" + _E,
            "GitHub tokens (ghp_…, gho_…, ghs_…, github_pat_…)",
            anchors=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        ),
        Detector(
            "gitlab_token",
            _B + r"gl(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_-]{20,64}" + r"(?![A-Za-z0-9_-])",
            "GitLab tokens (glpat-…)",
            anchors=("glpat-", "gldt-", "glptt-", "glrt-", "glcbt-", "gloas-"),
        ),
        Detector(
            "slack_token",
            _B + r"(?:xox[abposre]-[0-9A-Za-z-]{10,250}|xapp-\d-[0-9A-Za-z-]{10,250})",
            "Slack tokens (xoxb-…, xoxp-…, xapp-…)",
            anchors=("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xapp-"),
        ),
        Detector(
            "stripe_key",
            _B + r"(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,247}" + _E,
            "Stripe secret and restricted keys (sk_live_…)",
            anchors=("_live_", "_test_"),
        ),
        Detector(
            "openai_key",
            _B + r"sk-(?:proj-|svcacct-|admin-|ant-(?:api|admin)\d\d-)?[A-Za-z0-9_-]{20,200}"
            r"(?![A-Za-z0-9_-])",
            "OpenAI and Anthropic style API keys (sk-…, sk-proj-…, sk-ant-…)",
            _openai_shaped,
            anchors=("sk-",),
        ),
        Detector(
            "google_api_key",
            _B + r"AIza[0-9A-Za-z_-]{35}" + r"(?![A-Za-z0-9_-])",
            "Google API keys (AIza…)",
            anchors=("AIza",),
        ),
        Detector(
            "private_key",
            r"-----BEGIN[ A-Z0-9]{0,40} PRIVATE KEY(?: BLOCK)?-----",
            "PEM private-key blocks",
            anchors=("PRIVATE KEY",),
        ),
        Detector(
            "jwt",
            _B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}",
            "JSON Web Tokens (eyJ….eyJ….…)",
            anchors=("eyJ",),
        ),
        Detector(
            "basic_auth",
            r"(?:[A-Za-z][A-Za-z0-9+.-]{0,15}://[^\s/?#@:\[\]]{1,128}:[^\s/?#@]{1,128}@"
            r"|(?i:basic) +[A-Za-z0-9+/]{6,}={0,2})",
            "user:password pairs (scheme://user:pass@, Basic credentials)",
            lambda token: "://" in token or _basic_pair(token),
            anchors=("@", "Basic", "basic", "BASIC"),
        ),
    )
}
BUILT_IN_NAMES = (*BUILTIN_DETECTORS, ENTROPY)
_AWS_PREFIXES = ("akia", "asia", "abia", "acca", "aida", "aroa")
_CASELESS_AWS = (
    r"(?P<aws_access_key>(?<![a-z0-9_])(?:akia|asia|abia|acca|aida|aroa)[0-9a-z]{16}(?![a-z0-9_]))"
)
MIN_SIGNATURE = 4  # base64 or hex characters: shorter ones would turn up by chance
RUN_LENGTH = 20  # an encoded secret (16 bytes and more) is a run at least this long
# Starting only where a run starts keeps the search linear: no rescan from inside a word.
_LONG_RUN = re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{RUN_LENGTH},}}")
_HEX_STRETCH = re.compile(r"[0-9a-f]{16}")  # 8 bytes (the shortest canary), hex-encoded


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1): soft
# hyphen, combining grapheme joiner, Arabic letter mark, Hangul fillers, Khmer inherent vowels,
# Mongolian selectors, zero-width characters and joiners, bidi controls, word joiners and
# invisible operators, variation selectors, BOM, shorthand format controls, musical format
# controls and the tag block with its reserved neighbours. A renderer shows none of them.
DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]+"
)
# The full stops UTS 46 maps to '.' (NFKC leaves the ideographic one as it is).
_FULL_STOPS = str.maketrans(dict.fromkeys("\u3002\uff0e\uff61", "."))
_URL_SPACE = " \t\r\n\f\v"  # what the URL parser strips around a URL (urls.py)


def fold(text: str) -> str:
    """`text` as the detectors read it when it is not ASCII: compatibility forms folded
    (NFKC: fullwidth, mathematical, circled and other variant letters and digits become the
    ASCII they stand for, as UTS 46 maps a host before it is dialled, but keeping their
    case), the full stops UTS 46 reads as '.' read so, and every default-ignorable code point
    dropped, so that none of them can split or disguise a secret."""
    if text.isascii():
        return text
    folded = unicodedata.normalize("NFKC", text).translate(_FULL_STOPS)
    return DEFAULT_IGNORABLE.sub("", folded)


def literal_trie(words: Iterable[str]) -> str:
    """An expression matching any of `words`, as a trie: `re` then compares one character
    per branch, where a flat alternation tries every word at every position."""
    root: dict[str, Any] = {}
    for word in words:
        if word:
            node = root
            for char in word:
                node = node.setdefault(char, {})
            node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        ends = "" in node
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if ends:
            return f"(?:{body})?"
        return body

    return emit(root)


def encoded_signatures(literal: str) -> set[str]:
    """The substrings that `literal` always turns into when base64-encoded (standard and
    URL-safe, at each of the three byte alignments) or hex-encoded (either case): what is
    left of an anchor inside a wrapped secret. A base64 character is kept only when it
    depends on the literal's bits alone, found by encoding with all-zero and all-one
    neighbours: a character that depends on an unknown bit differs between the two."""
    data = literal.encode()
    found = {data.hex(), data.hex().upper()} if len(data) * 2 >= MIN_SIGNATURE else set()
    for pad in range(3):
        low = base64.b64encode(b"\0" * pad + data + b"\0\0").decode()
        high = base64.b64encode(b"\xff" * pad + data + b"\xff\xff").decode()
        run = ""
        best = ""
        for a, b in zip(low, high, strict=True):
            run = run + a if a == b else ""
            if len(run) > len(best):
                best = run
        if len(best) >= MIN_SIGNATURE:
            found.add(best)
            found.add(best.replace("+", "-").replace("/", "_"))
    return found


@dataclass(frozen=True, slots=True)
class EntropySettings:
    min_length: int = 32
    min_bits_per_char: float = 4.0
    where: tuple[str, ...] = ("host_labels",)


@dataclass(frozen=True, slots=True)
class CustomPattern:
    name: str
    regex: str


@dataclass(frozen=True, slots=True)
class Finding:
    """Which detector matched where; never the match itself."""

    detector: str
    location: str
    fingerprint: str

    @property
    def rule(self) -> str:
        return f"dlp.{self.detector}"

    def to_record(self) -> dict[str, str]:
        return {
            "detector": self.detector,
            "location": self.location,
            "fingerprint": self.fingerprint,
        }


# --- fingerprints ----------------------------------------------------------------------------



def fingerprint(detector: str, match: str, key: bytes) -> str:
    """96 bits of HMAC-SHA256(key, detector NUL match): equal secrets give equal prints."""
    digest = hmac.new(key, f"{detector}\0{match}".encode(), hashlib.sha256)
    return digest.hexdigest()[:24]


def random_fingerprint_key() -> bytes:
    """A key for settings no configuration keyed: their prints correlate within them only."""
    return os.urandom(32)


# --- the compiled settings ---------------------------------------------------------------------

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
# Odd lengths too: one stray nibble before (or after) the bytes must not hide them.
_HEX_RUN = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{16,}(?![0-9A-Fa-f])")
_TOKEN_RUN_TEMPLATE = r"[A-Za-z0-9_+/=-]{%d,}"
_NAME_SHAPE = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,40}\Z")
# A decoding is searched as text with every byte that is not printable ASCII read as a line
# break: a secret stands out between them, and no detector's match spans a line break.
_UNPRINTABLE_BYTES = bytes(b for b in range(256) if not (32 <= b < 127 or b in (9, 13)))
_AS_LINE_BREAKS = bytes.maketrans(_UNPRINTABLE_BYTES, b"\n" * len(_UNPRINTABLE_BYTES))
# The entropy detector's alphabets, smallest first, with their bits per character at most.
_HEX_ALPHABETS = (frozenset("0123456789abcdef"), frozenset("0123456789ABCDEF"))
_BASE32_ALPHABETS = (
    frozenset("abcdefghijklmnopqrstuvwxyz234567"),
    frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
)


@dataclass(frozen=True, slots=True)
class Hit:
    """A detector's match inside one piece of text: what redaction and fingerprints use.
    Internal: it holds the match, so it never leaves this module's callers in the policy
    package."""

    detector: str
    match: str


@dataclass(frozen=True, slots=True)
class DlpSettings:
    """The policy's `dlp` section, compiled."""

    mode: DlpMode = DlpMode.OFF
    detectors: tuple[str, ...] = tuple(BUILTIN_DETECTORS)  # the known formats switched on
    entropy: EntropySettings | None = EntropySettings()  # None: switched off
    canaries: tuple[str, ...] = field(default=(), repr=False)
    canaries_file: str | None = None
    patterns: tuple[CustomPattern, ...] = ()
    untrusted_hosts: DlpMode = DlpMode.OFF
    body_prefix_bytes: int = DEFAULT_BODY_PREFIX
    # The HMAC key of fingerprints: not policy text, so never compared, printed or hashed.
    fingerprint_key: bytes = field(
        default_factory=random_fingerprint_key, repr=False, compare=False
    )
    _formats: Any = field(init=False, repr=False, compare=False)
    _checks: dict[str, Callable[[str], bool]] = field(init=False, repr=False, compare=False)
    _custom: Any = field(init=False, repr=False, compare=False)
    _canary: Any = field(init=False, repr=False, compare=False)
    _tokens: Any = field(init=False, repr=False, compare=False)
    _trigger: Any = field(init=False, repr=False, compare=False)
    _coarse: Any = field(init=False, repr=False, compare=False)
    _caseless: Any = field(init=False, repr=False, compare=False)
    _entropy_beyond_hosts: bool = field(init=False, repr=False, compare=False)
    _host_entropy_length: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        chosen = [BUILTIN_DETECTORS[name] for name in self.detectors]
        formats = "|".join(f"(?P<{d.name}>{d.regex})" for d in chosen)
        setter = object.__setattr__
        setter(self, "_formats", re.compile(formats) if formats else None)
        setter(self, "_checks", {d.name: d.check for d in chosen if d.check is not None})
        setter(self, "_custom", tuple((p.name, compile_re2(p.regex)) for p in self.patterns))
        canary = "|".join(re.escape(c) for c in sorted(set(self.canaries), key=len, reverse=True))
        setter(self, "_canary", compile_re2(canary) if canary else None)
        anchors = {a for d in chosen for a in d.anchors} | set(self.canaries)
        signatures = set(anchors)
        for anchor in anchors:
            signatures |= encoded_signatures(anchor)
        setter(self, "_trigger", re.compile(literal_trie(signatures)) if signatures else None)
        # The whole-URL first look (`_may_hold_url`) needs the canaries as literals; every
        # known format is a long mixed run or has a lower-case anchor it checks by itself.
        canaries: set[str] = set()
        for canary in self.canaries:
            canaries |= {canary, *encoded_signatures(canary)}
        setter(self, "_coarse", re.compile(literal_trie(canaries)) if canaries else None)
        # In a host name, what survives a change of case: canaries, and AWS key ids (upper
        # case by format, so lower case carries all of one).
        caseless = []
        if self.canaries:
            trie = literal_trie({c.lower() for c in self.canaries})
            caseless.append(f"(?P<{CANARY}>{trie})")
        if "aws_access_key" in self.detectors:
            caseless.append(_CASELESS_AWS)
        setter(self, "_caseless", re.compile("|".join(caseless)) if caseless else None)
        length = self.entropy.min_length if self.entropy else 0
        setter(self, "_tokens", re.compile(_TOKEN_RUN_TEMPLATE % length) if length else None)
        # Precomputed for `scan_url`'s fast path, which most URLs take.
        setter(self, "_entropy_beyond_hosts", self.entropy_in("path") or self.entropy_in("query"))
        setter(self, "_host_entropy_length", length if self.entropy_in("host_labels") else 0)

    def _finding(self, hit: Hit, location: str) -> Finding:
        return Finding(hit.detector, location, self.fingerprint(hit.detector, hit.match))

    def keyed(self, key: bytes) -> DlpSettings:
        """These settings fingerprinting under `key` (the gateway configuration's); the
        compiled detectors are shared, not built again."""
        settings = copy.copy(self)
        object.__setattr__(settings, "fingerprint_key", key)
        return settings

    def fingerprint(self, detector: str, match: str) -> str:
        return fingerprint(detector, match, self.fingerprint_key)

    @property
    def _min_length(self) -> int:
        return self.entropy.min_length if self.entropy else 1 << 30

    @property
    def active(self) -> bool:
        return self.mode is not DlpMode.OFF

    def entropy_in(self, where: str) -> bool:
        return self.entropy is not None and where in self.entropy.where

    # --- scanning -----------------------------------------------------------------------

    def scan_text(self, text: str, *, entropy: bool = False) -> Hit | None:
        """The first detector that matches `text` as written, percent-decoded, or inside a
        base64 or hex run of it; `entropy` adds the entropy detector on the text as written."""
        if len(text) > MAX_SCANNED_CHARS:
            text = text[:MAX_SCANNED_CHARS]
        hit = self._scan_form(text, entropy)
        if hit is None and "%" in text:
            decoded = unquote(text, errors="replace")
            if decoded != text:
                hit = self._scan_form(decoded, entropy)
        return hit

    def _scan_form(self, text: str, entropy: bool, *, folded: bool = False) -> Hit | None:
        hit = None
        if not folded and not text.isascii():
            # Folded first: a format spelled with one fullwidth letter is that format, not
            # the random-looking run beside the letter.
            folded_text = fold(text)
            if folded_text != text:
                hit = self._scan_form(folded_text, entropy, folded=True)
                if hit is not None:
                    return hit
        if self.may_hold(text):
            hit = self.match(text) or self._wrapped(text)
        if hit is None and entropy:
            hit = self._high_entropy(text)
        return hit

    def may_hold(self, text: str) -> bool:
        """False when no known format, canary or custom pattern can be in `text`: none of
        their anchors appears, as written, percent-decoded, base64- or hex-encoded. One
        regular-expression pass over literals; most URLs stop here."""
        if self._custom and (
            "%" in text or self._custom_in(text) or _BASE64_RUN.search(text) is not None
        ):
            return True  # custom expressions have no anchors: they run on the text itself
        trigger = self._trigger
        if trigger is None:
            return False
        if trigger.search(text) is not None:
            return True
        return "%" in text and trigger.search(unquote(text, errors="replace")) is not None

    def _may_hold_url(self, text: str) -> bool:
        """`may_hold` for a whole URL, cheaper, as a URL carries no spaces: a `%` or `@`, an
        anchor of a format that may be lower case, a canary, or a run of at least 20 token
        characters that is not plain lower case (words, slugs and dates are; every other
        format, and base64 of anything that long, mixes cases; hex is looked for inside)."""
        if "%" in text or "@" in text or "sk-" in text or "xox" in text or "xapp-" in text:
            return True
        if self._custom and self._custom_in(text):
            return True
        if self._coarse is not None and self._coarse.search(text) is not None:
            return True
        for run in _LONG_RUN.findall(text):
            plain = run.islower() and _HEX_STRETCH.search(run) is None
            if not plain and not run.isdigit():
                return True
        return False

    def matches(self, text: str, limit: int = 256) -> Iterator[tuple[int, int, str]]:
        """(start, end, detector) of the known formats, canaries and custom patterns in
        `text` as written, at most `limit` of them: what redaction blanks."""
        found = 0
        if self._formats is not None:
            for match in self._formats.finditer(text):
                name = match.lastgroup
                check = self._checks.get(name) if name is not None else None
                if name is not None and (check is None or check(match.group())):
                    yield match.start(), match.end(), name
                    found += 1
                    if found >= limit:
                        return
        searches = [(CANARY, self._canary)] if self._canary is not None else []
        for name, pattern in (*searches, *self._custom):
            for match in pattern.finditer(text):
                if match.group():
                    yield match.start(), match.end(), name
                    found += 1
                    if found >= limit:
                        return

    def _custom_in(self, text: str) -> bool:
        return any(pattern.search(text) is not None for _, pattern in self._custom)

    def match(self, text: str) -> Hit | None:
        """The first known format, canary or custom pattern in `text` as written."""
        if self._formats is not None:
            for match in self._formats.finditer(text):
                name = match.lastgroup
                assert name is not None
                check = self._checks.get(name)
                if check is None or check(match.group()):
                    return Hit(name, match.group())
        if self._canary is not None:
            found = self._canary.search(text)
            if found is not None:
                return Hit(CANARY, found.group())
        for name, pattern in self._custom:
            found = pattern.search(text)
            if found is not None and found.group():
                return Hit(name, found.group())
        return None

    def _wrapped(self, text: str) -> Hit | None:
        """A secret inside a base64 or hex run: decoded and matched again (one level)."""
        if len(text) < 16:
            return None
        # Without custom expressions, only a run holding an anchor's encoded signature can
        # decode to a match: the others are not decoded at all.
        signed = None if self._custom else self._trigger
        for run in _HEX_RUN.findall(text):
            if signed is not None and signed.search(run) is None:
                continue
            # Both pairings of the nibbles: a secret's bytes start at an even or odd digit.
            for start in (0, 1) if len(run) % 2 == 0 else (1, 0):
                end = start + (len(run) - start) // 2 * 2
                hit = self.match(_as_text(bytes.fromhex(run[start:end])))
                if hit is not None:
                    return hit
        for run in _BASE64_RUN.findall(text):
            if run.islower() or run.isdigit():
                continue  # words and numbers: base64 of text always mixes cases
            if signed is not None and signed.search(run) is None:
                continue
            for decoded in _base64_decodings(run):
                hit = self.match(decoded)
                if hit is not None:
                    return hit
        return None

    def _high_entropy(self, text: str) -> Hit | None:
        if self._tokens is None or self.entropy is None:
            return None
        threshold = self.entropy.min_bits_per_char
        for token in self._tokens.findall(text):
            if _random_looking(token) and bits_per_char(token) >= threshold * _scale(token):
                return Hit(ENTROPY, token)
        return None

    def scan_host(self, host: str) -> tuple[Hit, str] | None:
        """Each label of a host name (labels are matched one by one, so `AKIA…` split over
        two labels is not seen; a long random label is, by the entropy detector), as written
        and, when it is not ASCII, folded (`fold`); then, since a name is sent in whatever
        case, the canaries and AWS key ids in any case."""
        found = None
        if not host.isascii():
            folded = fold(host)
            if folded != host:
                found = self._scan_host_form(folded)  # first, as `_scan_form` does
            host_as_written, host = host, folded
            found = found or self._scan_host_form(host_as_written)
        else:
            found = self._scan_host_form(host)
        return found or self._scan_host_caseless(host)

    def _scan_host_caseless(self, host: str) -> tuple[Hit, str] | None:
        caseless = self._caseless
        if caseless is None:
            return None
        lowered = host.lower()
        if not self.canaries and not (
            "akia" in lowered
            or "asia" in lowered
            or "abia" in lowered
            or "acca" in lowered
            or "aida" in lowered
            or "aroa" in lowered
        ):
            return None  # the usual host: one pass per prefix (_AWS_PREFIXES), at C speed
        for match in caseless.finditer(lowered):
            name = match.lastgroup
            found = match.group()
            # An AWS key id is told from a word by a digit in its body.
            if name is not None and (name == CANARY or any(c.isdigit() for c in found[4:])):
                return Hit(name, found), f"host_label[{_label_index(lowered, found)}]"
        return None

    def _scan_host_form(self, host: str) -> tuple[Hit, str] | None:
        entropy = self.entropy_in("host_labels")
        anchored = self.may_hold(host)
        if anchored:
            hit = self.match(host)
            if hit is not None:
                return hit, f"host_label[{_label_index(host, hit.match)}]"
        elif not entropy or len(host) < self._min_length:
            return None
        for index, label in enumerate(host.split(".")):
            hit = self._wrapped(label) if anchored else None
            if hit is None and entropy and len(label) >= self._min_length:
                hit = self._high_entropy(label)
            if hit is not None:
                return hit, f"host_label[{index}]"
        return None

    def scan_path(self, raw_path: str) -> tuple[Hit, str] | None:
        entropy = self.entropy_in("path")
        for index, segment in enumerate(raw_path.split("/")[1:]):
            if segment:
                hit = self.scan_text(segment, entropy=entropy)
                if hit is not None:
                    return hit, f"path[{index}]"
        return None

    def scan_query(self, raw_query: str) -> tuple[Hit, str] | None:
        entropy = self.entropy_in("query")
        for index, pair in enumerate(re.split("[&;]", raw_query)):
            if not pair:
                continue
            name, _, value = pair.partition("=")
            hit = self.scan_text(name) or (
                self.scan_text(value, entropy=entropy) if value else None
            )
            if hit is not None:
                return hit, _named("query", name, index, self)
        return None

    def scan_url(self, url: str, dialled_host: str | None = None) -> Finding | None:
        """A URL as the agent wrote it (so host labels keep their case; the whitespace the
        parser strips around it stripped): host labels, then path segments, then query names
        and values; the fragment is never sent. A URL that is not ASCII is scanned folded
        too (`fold`), and `dialled_host`, the name the parser mapped it to (UTS 46, A-labels,
        lower case: what the resolver and `Host` get), too, when that differs."""
        if url[:1] in _URL_SPACE or url[-1:] in _URL_SPACE:
            url = url.strip(_URL_SPACE)
        if url.isascii():
            found = self._scan_url_form(url)
            if found is not None:
                return found
            # An ASCII name is dialled as written, in lower case: only case is left to look at.
            host = split_url(url)[0] if dialled_host is None else dialled_host
            hit = self._scan_host_caseless(host)
            return None if hit is None else self._finding(*hit)
        folded = fold(url)  # first, as `_scan_form` does
        found = self._scan_url_form(folded) if folded != url else None
        found = found or self._scan_url_form(url)
        if found is not None:
            return found
        host = fold(split_url(url)[0])
        if dialled_host is not None:
            written = host.lower()
            if dialled_host != (written[:-1] if written.endswith(".") else written):
                hit = self._scan_host_form(dialled_host)  # an A-label, say
                if hit is not None:
                    return self._finding(*hit)
            host = dialled_host
        hit = self._scan_host_caseless(host)
        return None if hit is None else self._finding(*hit)

    def _scan_url_form(self, url: str) -> Finding | None:
        # The coarse look, then the precise one over the whole URL (every anchor and its
        # base64 and hex signatures): most URLs that pass the first fail the second, and a
        # URL that fails both holds no known format, canary or custom match anywhere.
        if not self._entropy_beyond_hosts and (
            not self._may_hold_url(url) or not self.may_hold(url)
        ):
            # Only a long random host label is left to look for.
            shortest = self._host_entropy_length
            if not shortest or len(url) < shortest:
                return None
            start = url.find("://") + 3
            end = url.find("/", start)
            if (end if end != -1 else len(url)) - start < shortest:
                return None  # the whole authority is shorter than one long label
            found = self._scan_host_form(split_url(url)[0])
            return None if found is None else self._finding(*found)
        return self.scan_url_parts(*split_url(url))

    def scan_url_parts(self, host: str, raw_path: str, raw_query: str) -> Finding | None:
        """Host labels, then path segments, then query names and values."""
        found = (
            self.scan_host(host)
            or self.scan_path(raw_path)
            or (self.scan_query(raw_query) if raw_query else None)
        )
        return None if found is None else self._finding(*found)

    def scan_queries(self, queries: Sequence[str]) -> Finding | None:
        """Search queries: each as one piece of text (`query` entropy applies to them)."""
        entropy = self.entropy_in("query")
        for index, query in enumerate(queries):
            hit = self.scan_text(query, entropy=entropy)
            if hit is not None:
                where = "search_query" if len(queries) == 1 else f"search_query[{index}]"
                return self._finding(hit, where)
        return None

    def scan_headers(self, headers: Iterable[tuple[str, str]]) -> Finding | None:
        for index, (name, value) in enumerate(headers):
            hit = self.scan_text(value) or self.scan_text(name)
            if hit is not None:
                return self._finding(hit, _named("header", name, index, self).lower())
        return None

    def scan_body(self, prefix: bytes) -> Finding | None:
        text = prefix.decode("utf-8", "replace")
        hit = self.scan_text(text) if text else None
        return None if hit is None else self._finding(hit, "body")

    def secret_shaped(self, host: str, raw_path: str, raw_query: str) -> Finding | None:
        """For the untrusted-host check: a known format anywhere, or high entropy in any
        part of the URL whatever `entropy.where` says."""
        found = self.scan_url_parts(host, raw_path, raw_query)
        if found is not None or self._tokens is None:
            return found
        for index, segment in enumerate(raw_path.split("/")[1:]):
            hit = self._high_entropy(unquote(segment, errors="replace"))
            if hit is not None:
                return self._finding(hit, f"path[{index}]")
        for index, pair in enumerate(re.split("[&;]", raw_query)):
            name, _, value = pair.partition("=")
            hit = self._high_entropy(unquote(value, errors="replace")) if value else None
            if hit is not None:
                return self._finding(hit, _named("query", name, index, self))
        return None


def split_url(url: str) -> tuple[str, str, str]:
    """(host, path, query) of a URL's text, without parsing it again: the scheme, user info,
    port and fragment left out. Tolerant: any text gives three strings."""
    text = url.partition("#")[0]
    if text[:1] in _URL_SPACE:
        text = text.lstrip(_URL_SPACE)
    if "://" in text[:40]:
        text = text.partition("://")[2]
        end = len(text)
        for delimiter in "/?":
            at = text.find(delimiter)
            if at != -1 and at < end:
                end = at
        authority, text = text[:end], text[end:]
    else:
        authority = ""
    host = authority.rpartition("@")[2]
    # An IPv6 literal carries no name to look at.
    host = "" if host.startswith("[") else host.partition(":")[0]
    path, _, query = text.partition("?")
    return host, path, query




def _named(kind: str, name: str, index: int, settings: DlpSettings) -> str:
    """`query:<name>` / `header:<name>` when the name is short, plain and holds nothing a
    detector matches; else the position, so a location never carries agent-chosen data."""
    plain = _NAME_SHAPE.match(name) and settings.match(name) is None
    if plain and settings._high_entropy(name) is None:
        return f"{kind}:{name}"
    return f"{kind}[{index}]"


def _label_index(host: str, match: str) -> int:
    at = host.find(match)
    return host.count(".", 0, max(at, 0))


def _as_text(data: bytes) -> str:
    """Decoded bytes as the detectors read them: ASCII, every other byte a line break."""
    return data.translate(_AS_LINE_BREAKS).decode("ascii")


def _scale(token: str) -> float:
    """What share of the base64 alphabet's 6 bits per character the alphabet of `token` can
    reach: 4/6 for hex, 5/6 for base32, 1 for any other. `min_bits_per_char` is read against
    6 bits, so each alphabet is held to the same share of its own maximum, and a hex label
    (4 bits at most) can be flagged at all."""
    chars = set(token)
    if any(chars <= alphabet for alphabet in _HEX_ALPHABETS):
        return 4 / 6
    if any(chars <= alphabet for alphabet in _BASE32_ALPHABETS):
        return 5 / 6
    return 1.0


def _base64_decodings(run: str) -> Iterator[str]:
    """`run` read as base64 (standard or URL-safe) from each of its first four offsets,
    since the encoded secret may start mid-run."""
    body = run.rstrip("=")
    alphabet = b"-_" if ("-" in body or "_" in body) else b"+/"
    for start in range(4):
        chunk = body[start:]
        if len(chunk) < 12:
            break
        rest = len(chunk) % 4  # a partial last group still decodes (a secret's last bytes)
        chunk = chunk[:-1] if rest == 1 else chunk + "=" * ((4 - rest) % 4)
        try:
            data = base64.b64decode(chunk, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
        yield _as_text(data)


def _random_looking(token: str) -> bool:
    """Random data of this length holds a letter and a digit; words and numbers do not."""
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def bits_per_char(text: str) -> float:
    """Shannon entropy of the characters of `text`, in bits per character."""
    if not text:
        return 0.0
    length = len(text)
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    return -sum(n / length * math.log2(n / length) for n in counts.values())


def compile_re2(pattern: str) -> Any:
    """RE2 with the options every DLP pattern gets (Unicode text, bounded memory)."""
    options = re2.Options()
    options.max_mem = 8 << 20
    options.log_errors = False
    return re2.compile(pattern, options)
