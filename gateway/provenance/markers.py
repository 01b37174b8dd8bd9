"""Untrusted-content markers: nonces, the sanitiser, wrapping and unwrapping.

Pure and stdlib-only. It changes nothing in web text except what the rules below name; it does
not decide what is untrusted (every caller wraps all web text) and it does not hash or sign.

Sanitising happens in two passes, in this order, so that hidden characters cannot split a
marker past the second pass:

1. **Invisible characters** are removed and counted: C0 and C1 controls except `\\n` and `\\t`
   (carriage returns too: a lone CR can hide the start of a line on a terminal, and CRLF
   text reads the same with LF only; the CR of a CRLF is removed but not counted), bidi
   controls, zero-width spaces and word joiners,
   U+FEFF, the soft hyphen, the combining grapheme joiner, the Mongolian vowel separator, the
   Hangul fillers U+3164/U+FFA0, interlinear annotation controls, the musical format
   controls, the whole tag block U+E0000-U+E007F (subdivision flags such as England's
   degrade to a plain black flag) and lone surrogates. A ZWJ or ZWNJ is kept when it stands
   between two letters (or combining marks) or between two emoji (an emoji may be followed
   by VS16 or a skin-tone modifier); of several joiners in a row at most one is kept.
2. **Marker look-alikes** are neutralised, line by line (lines split at `\\n` only). Each line
   has a *folded copy*, made character by character so that every folded character knows the
   original characters it came from: angle-bracket homoglyphs to `<`/`>` (double ones such
   as `«` and `《` to `<<`), NFKC, Unicode's confusables of the marker words' letters, digits
   and `_` (a Cyrillic `Т`, a Greek `Ε`: `_CONFUSABLE_SOURCES`, taken from UTS #39's
   confusables.txt), upper case; the default-ignorable code points that step 1 keeps (a ZWJ
   or ZWNJ between letters, variation selectors) read as separators, so no marker word or
   role token is split by one; HTML references for `<`/`>` (`&lt;`, `&#60;`,
   `&#x3c;`, with or without `;`) become a single `<`/`>` standing for the whole reference.
   The *light* fold keeps spaces; the *tight* fold also drops whitespace, `_`, `-` and every
   other dash or connector punctuation.
   - A line whose tight fold contains `UNTRUSTEDWEBCONTENT` is a marker line. Each
     occurrence (extended to the left over a directly preceding `END`) is one look-alike:
     its first separator becomes `·` (with none, a `·` is inserted after its first word,
     `END` or `UNTRUSTED`), and on that line every run of two or more `<` (or `>`) in the
     tight fold has each of its original characters (or references) replaced by `‹` (`›`).
   - Chat-template role tokens are matched anywhere in the light fold: `<|NAME|>` for any
     NAME without spaces, bars or brackets (ChatML, Llama 3, harmony, DeepSeek's fullwidth
     bars), `[INST]`, `[/INST]`, `<<SYS>>`, `<</SYS>>`, and the tags `tool_result(s)`,
     `function_results`, `function_calls`, `tool_call(s)`, `tool_use`, `tool_response`,
     `start_of_turn`, `end_of_turn`, `system-reminder` (opening or closing, attributes
     allowed). Each is one look-alike; every bracket in it (`<`, `[` and their look-alikes)
     becomes `‹`, every closing one `›`; the rest of the token is kept.
   A `>>>` anywhere else is left alone: the unguessable nonce is what makes a forged end
   marker useless, the scrubbing only keeps a model from being confused by one.

The rules are applied line by line by a careful, slow path. A whole-text filter at C speed
picks the lines it must run on; it may pick a line with nothing to neutralise, never miss one
(tests hold it to the careful path). On the UTF-8 bytes, it is one of two: when the only
special characters in the text are separators (most pages), RE2 automata search the bytes
lower-cased, skipping separators inside the marker word; otherwise a cheap tight fold of the
whole text (look-alikes replaced, separators dropped), then byte searches.
"""

from __future__ import annotations

import re
import secrets
import string
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import re2

MARKER_WORD = "UNTRUSTEDWEBCONTENT"
_END_WORD = "END"
_FIRST_WORD = "UNTRUSTED"
_BEGIN_TAG = "UNTRUSTED_WEB_CONTENT"
_END_TAG = "END_UNTRUSTED_WEB_CONTENT"

MAX_SOURCE_CHARS = 2048
_MIN_NONCE_DIGITS = 24

_OPEN_NEUTRAL = "\u2039"  # ‹
_CLOSE_NEUTRAL = "\u203a"  # ›
_SEPARATOR_NEUTRAL = "\u00b7"  # ·

# Characters that look like `<` or `>`; the doubled ones count as two.
_BRACKET_FOLD = str.maketrans(
    {
        **dict.fromkeys(
            "\u2039\u3008\u2329\uff1c\ufe64\u276e\u27e8\u276c\u2770\u29fc\u02c2\u1438\u2991\u22d6",
            "<",
        ),
        **dict.fromkeys(
            "\u203a\u3009\u232a\uff1e\ufe65\u276f\u27e9\u276d\u2771\u29fd\u02c3\u1433\u2992\u22d7",
            ">",
        ),
        **dict.fromkeys("\u00ab\u300a\u27ea\u226a", "<<"),
        **dict.fromkeys("\u00bb\u300b\u27eb\u226b", ">>"),
        "\u22d8": "<<<",
        "\u22d9": ">>>",
    }
)

# Whitespace (except the line break), dash and connector punctuation: every character for which
# str.isspace() holds or whose category is Pd or Pc (a test re-derives this list from unicodedata).
_SEPARATORS = frozenset(
    "\t\x0b\x0c\r\x1c\x1d\x1e\x1f -_\x85\xa0\u058a\u05be\u1400\u1680\u1806"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2010\u2011\u2012\u2013\u2014\u2015\u2028\u2029\u202f\u203f\u2040\u2054\u205f"
    "\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u2e5d\u3000\u301c\u3030\u30a0"
    "\ufe31\ufe32\ufe33\ufe34\ufe4d\ufe4e\ufe4f\ufe58\ufe63\uff0d\uff3f\U00010ead"
)
_INVISIBLE_RANGES = (
    (0x00, 0x08),
    (0x0B, 0x1F),
    (0x7F, 0x9F),
    (0xAD, 0xAD),
    (0x34F, 0x34F),
    (0x61C, 0x61C),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0x3164, 0x3164),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
    (0xD800, 0xDFFF),
)
_INVISIBLE_CHARS = frozenset(
    chr(code) for low, high in _INVISIBLE_RANGES for code in range(low, high + 1)
)
_JOINERS = frozenset("\u200c\u200d")

# Confusables: the characters Unicode's confusables data (UTS #39 confusables.txt, as packaged
# in confusable-homoglyphs 3.3.1's confusables.json) maps to one of the marker words' letters
# (either case), a digit or `_`, less those NFKC folds there already (fullwidth, mathematical
# and circled forms). Generated, then kept here: no dependency reads the data at run time.
# Target -> its sources.
_CONFUSABLE_SOURCES = {
    "2": "\u01a7\u03e8\u14bf\ua644\ua6ef\ua75a",
    "3": "\u01b7\u021c\u0417\u04e0\u2ccc\ua76a\ua7ab\U000118ca\U00016f3b\U0001d206",
    "4": "\u13ce\U000118af",
    "5": "\u01bc\U000118bb",
    "6": "\u0431\u13ee\u2cd2\U000118d5",
    "7": "\U000104d2\U000118c6\U0001d212",
    "8": "\u0222\u0223\u09ea\u0a6a\u0b03\U0001031a",
    "9": "\u09ed\u0a67\u0b68\u0d6d\u2cca\ua76e\U000118ac\U000118cc\U000118d6",
    "B": "\u0392\u0412\u13f4\u15f7\ua4d0\ua7b4\U00010282\U000102a1\U00010301",
    "C": (
        "\u0421\u13df\u2ca4\ua4da\U000102a2\U00010302\U00010415\U0001051c\U000118e9\U000118f2"
        "\U0001f74c"
    ),
    "D": "\u13a0\u15de\u15ea\ua4d3",
    "E": "\u0395\u0415\u13ac\u22ff\u2d39\ua4f0\U00010286\U000118a6\U000118ae",
    "N": "\u039d\u2c9a\ua4e0\U00010513",
    "O": (
        "\u039f\u041e\u0555\u09e6\u0b20\u0b66\u12d0\u2c9e\u2d54\u3007\ua4f3\U00010292"
        "\U000102ab\U00010404\U000104c2\U00010516\U000114d0\U000118b5\U000118e0"
    ),
    "R": "\u01a6\u13a1\u13d2\u1587\ua4e3\U000104b4\U00016f35\U0001d216",
    "S": "\u0405\u054f\u13d5\u13da\ua4e2\U00010296\U00010420\U00016f3a",
    "T": (
        "\u03a4\u0422\u13a2\u22a4\u27d9\u2ca6\ua4d4\U00010297\U000102b1\U00010315\U000118bc"
        "\U00016f0a\U0001f768"
    ),
    "U": "\u054d\u1200\u144c\u222a\u22c3\ua4f4\U000104ce\U000118b8\U00016f42",
    "W": "\u051c\u13b3\u13d4\ua4ea\U000118e6\U000118ef",
    "b": "\u0184\u042c\u13cf\u1472\u15af",
    "c": "\u0441\u1d04\u2ca5\uabaf\U0001043d",
    "d": "\u0501\u13e7\u146f\ua4d2",
    "e": "\u0435\u04bd\u212e\uab32",
    "n": "\u0578\u057c",
    "o": (
        "\u03bf\u03c3\u043e\u0585\u06f5\u0966\u0a66\u0ae6\u0be6\u0c02\u0c66\u0c82\u0ce6\u0d02"
        "\u0d20\u0d66\u0d82\u0e50\u0ed0\u101d\u1040\u10ff\u1d0f\u1d11\u2c9f\uab3d\U0001042c"
        "\U000104ea\U000118c8\U000118d7"
    ),
    "r": "\u0433\u1d26\u2c85\uab47\uab48\uab81",
    "s": "\u01bd\u0455\ua731\uabaa\U00010448\U000118c1",
    "u": "\u028b\u03c5\u057d\u1d1c\ua79f\uab4e\uab52\U000104f6\U000118d8",
    "w": "\u026f\u0461\u051d\u0561\u1d21\uab83\U0001170a\U0001170e\U0001170f",
}
_CONFUSABLE_FOLD = str.maketrans(
    {source: target for target, sources in _CONFUSABLE_SOURCES.items() for source in sources}
)
# Default-ignorable code points (DerivedCoreProperties.txt) that invisible-character removal
# keeps, so that scripts and emoji keep them: a ZWJ or ZWNJ between letters, variation
# selectors, Mongolian selectors, Hangul and Khmer fillers, the reserved ones. The folds read
# each as a separator, so none can split a marker word or a role token.
_KEPT_IGNORABLE_RANGES = (
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180D),
    (0x180F, 0x180F),
    (0x200C, 0x200D),
    (0x2065, 0x2065),
    (0xFE00, 0xFE0F),
    (0xFFF0, 0xFFF8),
    (0xE0080, 0xE0FFF),
)
_KEPT_IGNORABLE = frozenset(
    chr(code) for low, high in _KEPT_IGNORABLE_RANGES for code in range(low, high + 1)
)

_ENTITY = re.compile(r"&(?:(LT)|(GT)|#0*(?:(60)|(62))|#X0*(?:(3C)|(3E)));?")

_ROLE_TOKEN = re.compile(
    r"<\|[^\s|<>]{1,64}\|>"
    r"|\[/?INST\]"
    r"|<</?SYS>>"
    r"|</?(?:TOOL[_ -]?RESULTS?|FUNCTION[_ -]?RESULTS?|FUNCTION[_ -]?CALLS?|TOOL[_ -]?CALLS?"
    r"|TOOL[_ -]?USE|TOOL[_ -]?RESPONSE|START[_ -]?OF[_ -]?TURN|END[_ -]?OF[_ -]?TURN"
    r"|SYSTEM[_ -]?REMINDER)(?:\s[^<>\n]{0,256})?/?>"
)

_BRACKET_UNIT = re.compile(r"[<>\[\]]")
_DROP_SEPARATORS = str.maketrans(dict.fromkeys(_SEPARATORS))

_NONCE = re.compile(r"[0-9a-f]{24,}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BEGIN_LINE = re.compile(
    r"<<<UNTRUSTED_WEB_CONTENT nonce=([0-9a-f]{24,}) source=\"([^\"<>\s]*)\""
    r"(?: sha256=([0-9a-f]{64}))?>>>"
)
_END_LINE = re.compile(r"<<<END_UNTRUSTED_WEB_CONTENT nonce=([0-9a-f]{24,})>>>")


class MarkerError(ValueError):
    """A wrapped block is malformed, or `wrap` was given a bad nonce, source or digest."""


@dataclass(frozen=True, slots=True)
class Sanitized:
    text: str
    marker_lookalikes: int
    invisible_chars: int
    # `text` in UTF-8 when the sanitiser had it at hand, else None (encode it yourself)
    utf8: bytes | None = field(default=None, compare=False, repr=False)


def new_nonce() -> str:
    """128 random bits as 32 lowercase hex digits, one per response."""
    return secrets.token_hex(16)


def sanitize(text: str, *, utf8: bytes | None = None) -> Sanitized:
    """Remove invisible characters, then neutralise marker look-alikes and role tokens.

    `utf8`, when given, must be `text` encoded in UTF-8: the caller had it (the body as
    received) and the sanitiser then need not encode 100 KB again.
    """
    inventory = _inventory(text, utf8)
    visible, invisible = _remove_invisible(text, inventory.invisible)
    if inventory.invisible:
        inventory = _Inventory(visible.encode(), frozenset(), inventory.special)
    neutral, lookalikes = _neutralise(visible, inventory)
    return Sanitized(neutral, lookalikes, invisible, inventory.data if neutral is visible else None)


def source_attribute(url_or_name: str) -> str:
    """`url_or_name` percent-encoded so it cannot end the `source="…"` attribute or the line.

    Existing `%XX` escapes are kept, so the function is idempotent; at most 2048 characters.
    """
    if len(url_or_name) <= MAX_SOURCE_CHARS and _SOURCE_UNCHANGED.fullmatch(url_or_name):
        return url_or_name  # the common case, at C speed: nothing to encode
    out: list[str] = []
    length = 0
    index = 0
    while index < len(url_or_name) and length < MAX_SOURCE_CHARS:
        char = url_or_name[index]
        if char == "%" and _is_escape(url_or_name, index):
            piece = url_or_name[index : index + 3]
            index += 3
        else:
            piece = char if char in _SOURCE_SAFE else _percent_encode(char)
            index += 1
        if length + len(piece) > MAX_SOURCE_CHARS:
            break  # never cut an escape in half
        out.append(piece)
        length += len(piece)
    return "".join(out)


def wrap(text: str, *, nonce: str, source: str, sha256: str | None = None) -> str:
    """The begin line, `\\n`, `text` (already sanitised), `\\n`, the end line."""
    if not _NONCE.fullmatch(nonce):
        raise MarkerError("the nonce must be at least 24 lowercase hex digits")
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        raise MarkerError("sha256 must be 64 lowercase hex digits")
    if f"nonce={nonce}" in text:
        # Only a reused or leaked nonce can be in the text; a fresh one never is.
        raise MarkerError("the nonce occurs in the text; draw a fresh nonce")
    digest = f" sha256={sha256}" if sha256 is not None else ""
    begin = f'<<<{_BEGIN_TAG} nonce={nonce} source="{source_attribute(source)}"{digest}>>>'
    return f"{begin}\n{text}\n<<<{_END_TAG} nonce={nonce}>>>"


def unwrap(wrapped: str, nonce: str) -> str:
    """The text between a begin and an end line carrying `nonce`; raises MarkerError otherwise."""
    first = wrapped.find("\n")
    last = wrapped.rfind("\n")
    if first < 0 or last == first:
        raise MarkerError("not a wrapped block: expected a begin line, the text and an end line")
    begin = _BEGIN_LINE.fullmatch(wrapped, 0, first)
    if begin is None:
        raise MarkerError("the first line is not an untrusted-content begin marker")
    end = _END_LINE.fullmatch(wrapped, last + 1)
    if end is None:
        raise MarkerError("the last line is not an untrusted-content end marker")
    if begin.group(1) != nonce or end.group(1) != nonce:
        raise MarkerError("the markers do not carry the expected nonce")
    return wrapped[first + 1 : last]


# --- what a text holds --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Inventory:
    """A text's UTF-8 bytes and the characters in it that the sanitiser must look at."""

    data: bytes
    invisible: frozenset[str]  # invisible characters present
    special: frozenset[str]  # non-ASCII characters present that the line filter must fold


def _inventory(text: str, utf8: bytes | None = None) -> _Inventory:
    # Python-level work per character costs tens of nanoseconds; bytes.translate costs well
    # under one. Deleting the visible ASCII bytes leaves the ASCII controls and whole UTF-8
    # sequences of the non-ASCII characters: about 1% of an ordinary page, and only that
    # short remainder goes through the regex.
    data = utf8 if utf8 is not None else text.encode("utf-8", "surrogatepass")
    rest = data.translate(None, _ASCII_VISIBLE)
    if not rest:
        return _Inventory(data, frozenset(), frozenset())
    notable = frozenset(_NOTABLE.findall(rest.decode("utf-8", "surrogatepass")))
    return _Inventory(data, notable & _INVISIBLE_CHARS, notable & _FILTER_SPECIAL_CHARS)


# --- invisible characters ----------------------------------------------------------------


def _remove_invisible(text: str, present: frozenset[str] | None = None) -> tuple[str, int]:
    """`text` without its invisible characters, and how many were removed and counted.

    `present` is the set of invisible characters in `text` when the caller knows it already.
    """
    if present is None:
        present = _inventory(text).invisible
    if not present:
        return text, 0
    removed = 0
    if "\r" in present and "\r\n" in text:
        # The CR of a CRLF line break is removed but not counted: it hides nothing.
        text = text.replace("\r\n", "\n")
    # Whole-text count and replace per distinct character run at C speed. Removing the other
    # invisible characters first leaves each run's joiners together, between the same two
    # visible characters the whole run stood between.
    for char in present - _JOINERS:
        found = text.count(char)
        if found:
            removed += found
            text = text.replace(char, "")
    if present & _JOINERS:
        text, dropped = _drop_stray_joiners(text)
        removed += dropped
    return text, removed


def _drop_stray_joiners(text: str) -> tuple[str, int]:
    """Of each run of ZWJ/ZWNJ keep the first if the run joins two letters or two emoji."""
    positions: list[int] = []
    for joiner in _JOINERS:
        index = text.find(joiner)
        while index >= 0:
            positions.append(index)
            index = text.find(joiner, index + 1)
    positions.sort()
    out: list[str] = []
    dropped = 0
    copied = 0  # text[:copied] is handled
    run_start = 0
    for number, position in enumerate(positions):
        if number == 0 or position != positions[number - 1] + 1:
            run_start = position
        if number + 1 < len(positions) and positions[number + 1] == position + 1:
            continue  # the run goes on
        run_end = position + 1
        before = text[run_start - 1] if run_start > 0 else ""
        after = text[run_end] if run_end < len(text) else ""
        keep = _joins(before, after)
        if keep and run_end == run_start + 1:
            continue  # a single joiner that stays: copied with the text after it
        dropped += run_end - run_start - keep
        out.append(text[copied:run_start])
        if keep:
            out.append(text[run_start])
        copied = run_end
    if not out:
        return text, 0
    out.append(text[copied:])
    return "".join(out), dropped


def _joins(before: str, after: str) -> bool:
    if not before or not after:
        return False
    if _is_letter(before) and _is_letter(after):
        return True
    return (_is_emoji(before) or before in "\ufe0f\u20e3") and _is_emoji(after)


def _is_letter(char: str) -> bool:
    return unicodedata.category(char)[0] in "LM"


# Extended_Pictographic, approximated by blocks (Python's unicodedata does not expose it).
_EMOJI_RANGES = (
    (0x00A9, 0x00A9),
    (0x00AE, 0x00AE),
    (0x203C, 0x203C),
    (0x2049, 0x2049),
    (0x2122, 0x2122),
    (0x2139, 0x2139),
    (0x2190, 0x21FF),
    (0x2300, 0x23FF),
    (0x24C2, 0x24C2),
    (0x25A0, 0x27BF),
    (0x2900, 0x297F),
    (0x2B00, 0x2BFF),
    (0x3030, 0x3030),
    (0x303D, 0x303D),
    (0x3297, 0x3297),
    (0x3299, 0x3299),
    (0x1F000, 0x1FAFF),
    (0x1FC00, 0x1FFFD),
)


_EMOJI = frozenset(chr(code) for low, high in _EMOJI_RANGES for code in range(low, high + 1))


def _is_emoji(char: str) -> bool:
    return char in _EMOJI


# --- marker look-alikes ------------------------------------------------------------------


def _neutralise(text: str, inventory: _Inventory) -> tuple[str, int]:
    candidates = _filter_candidates(inventory)
    if not candidates:
        return text, 0
    lines = text.split("\n")
    total = 0
    for number in candidates:
        lines[number], count = _neutralise_line(lines[number])
        total += count
    return "\n".join(lines), total


# --- the line filter ---------------------------------------------------------------------
#
# The filter fold of a text is a cheap stand-in for the tight fold of every line at once, in
# bytes: ASCII letters lower-cased, `[` made `<`, separators dropped, references for `<` made
# `<`, each special character (below) replaced by its own fold's relevant characters, and
# every other non-ASCII character left as its UTF-8 bytes, which nothing below matches. Each
# match of the careful path has a match here on the same line: what the careful path needs
# in a row stays in a row (dropping more, such as separators between `<` and `|`, only adds
# candidates). The line breaks are kept, so a position tells its line.

# What the filter looks for in a fold: the marker word, role-token starts, references for `<`.
_FILTER_RELEVANT = frozenset(string.ascii_letters + string.digits + "<&#;|/[]")

# Code points above ASCII whose fold holds a filter-relevant character or only separators
# (Unicode 14.0: Python 3.11's unicodedata; a test re-derives the table with _is_filter_special).
_FILTER_SPECIAL_UNICODE = "14.0.0"
_FILTER_SPECIAL_RANGES: tuple[tuple[int, int], ...] = (
    (0x85, 0x85),
    (0xA0, 0xA0),
    (0xAA, 0xAB),
    (0xB2, 0xB3),
    (0xB9, 0xBA),
    (0xBC, 0xBE),
    (0xDF, 0xDF),
    (0x131, 0x133),
    (0x13F, 0x140),
    (0x149, 0x149),
    (0x17F, 0x17F),
    (0x1C4, 0x1CC),
    (0x1F0, 0x1F3),
    (0x2B0, 0x2B0),
    (0x2B2, 0x2B3),
    (0x2B7, 0x2B8),
    (0x2C2, 0x2C2),
    (0x2E1, 0x2E3),
    (0x37E, 0x37E),
    (0x58A, 0x58A),
    (0x5BE, 0x5BE),
    (0x1400, 0x1400),
    (0x1438, 0x1438),
    (0x1680, 0x1680),
    (0x1806, 0x1806),
    (0x1D2C, 0x1D2C),
    (0x1D2E, 0x1D2E),
    (0x1D30, 0x1D31),
    (0x1D33, 0x1D3A),
    (0x1D3C, 0x1D3C),
    (0x1D3E, 0x1D43),
    (0x1D47, 0x1D49),
    (0x1D4D, 0x1D4D),
    (0x1D4F, 0x1D50),
    (0x1D52, 0x1D52),
    (0x1D56, 0x1D58),
    (0x1D5B, 0x1D5B),
    (0x1D62, 0x1D65),
    (0x1D9C, 0x1D9C),
    (0x1DA0, 0x1DA0),
    (0x1DBB, 0x1DBB),
    (0x1E96, 0x1E9A),
    (0x2000, 0x200A),
    (0x2010, 0x2015),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x2039, 0x2039),
    (0x203F, 0x2040),
    (0x2054, 0x2054),
    (0x205F, 0x205F),
    (0x2070, 0x2071),
    (0x2074, 0x2079),
    (0x207F, 0x2089),
    (0x2090, 0x2093),
    (0x2095, 0x209C),
    (0x20A8, 0x20A8),
    (0x2100, 0x2103),
    (0x2105, 0x2106),
    (0x2109, 0x210E),
    (0x2110, 0x2113),
    (0x2115, 0x2116),
    (0x2119, 0x211D),
    (0x2120, 0x2122),
    (0x2124, 0x2124),
    (0x2128, 0x2128),
    (0x212A, 0x212A),
    (0x212C, 0x212D),
    (0x212F, 0x2131),
    (0x2133, 0x2134),
    (0x2139, 0x2139),
    (0x213B, 0x213B),
    (0x2145, 0x2149),
    (0x2150, 0x217F),
    (0x2189, 0x2189),
    (0x226A, 0x226A),
    (0x22D6, 0x22D6),
    (0x22D8, 0x22D8),
    (0x2329, 0x2329),
    (0x2460, 0x24EA),
    (0x276C, 0x276C),
    (0x276E, 0x276E),
    (0x2770, 0x2770),
    (0x27E8, 0x27E8),
    (0x27EA, 0x27EA),
    (0x2991, 0x2991),
    (0x29FC, 0x29FC),
    (0x2C7C, 0x2C7D),
    (0x2E17, 0x2E17),
    (0x2E1A, 0x2E1A),
    (0x2E3A, 0x2E3B),
    (0x2E40, 0x2E40),
    (0x2E5D, 0x2E5D),
    (0x3000, 0x3000),
    (0x3008, 0x3008),
    (0x300A, 0x300A),
    (0x301C, 0x301C),
    (0x3030, 0x3030),
    (0x30A0, 0x30A0),
    (0x3250, 0x325F),
    (0x32B1, 0x32CF),
    (0x3358, 0x337A),
    (0x3380, 0x33FF),
    (0xA7F2, 0xA7F4),
    (0xFB00, 0xFB06),
    (0xFE14, 0xFE14),
    (0xFE31, 0xFE34),
    (0xFE3D, 0xFE3D),
    (0xFE3F, 0xFE3F),
    (0xFE47, 0xFE48),
    (0xFE4D, 0xFE4F),
    (0xFE54, 0xFE54),
    (0xFE58, 0xFE58),
    (0xFE5F, 0xFE60),
    (0xFE63, 0xFE64),
    (0xFF03, 0xFF03),
    (0xFF06, 0xFF06),
    (0xFF0D, 0xFF0D),
    (0xFF0F, 0xFF19),
    (0xFF1B, 0xFF1C),
    (0xFF21, 0xFF3B),
    (0xFF3D, 0xFF3D),
    (0xFF3F, 0xFF3F),
    (0xFF41, 0xFF5A),
    (0xFF5C, 0xFF5C),
    (0x107A5, 0x107A5),
    (0x10EAD, 0x10EAD),
    (0x1D400, 0x1D454),
    (0x1D456, 0x1D49C),
    (0x1D49E, 0x1D49F),
    (0x1D4A2, 0x1D4A2),
    (0x1D4A5, 0x1D4A6),
    (0x1D4A9, 0x1D4AC),
    (0x1D4AE, 0x1D4B9),
    (0x1D4BB, 0x1D4BB),
    (0x1D4BD, 0x1D4C3),
    (0x1D4C5, 0x1D505),
    (0x1D507, 0x1D50A),
    (0x1D50D, 0x1D514),
    (0x1D516, 0x1D51C),
    (0x1D51E, 0x1D539),
    (0x1D53B, 0x1D53E),
    (0x1D540, 0x1D544),
    (0x1D546, 0x1D546),
    (0x1D54A, 0x1D550),
    (0x1D552, 0x1D6A4),
    (0x1D7CE, 0x1D7FF),
    (0x1F100, 0x1F10A),
    (0x1F110, 0x1F12E),
    (0x1F130, 0x1F14F),
    (0x1F16A, 0x1F16C),
    (0x1F190, 0x1F190),
    (0x1FBF0, 0x1FBF9),
)

_TIGHT_TABLE = bytes.maketrans(
    string.ascii_uppercase.encode() + b"[", string.ascii_lowercase.encode() + b"<"
)
_ASCII_SEPARATOR_BYTES = bytes(sorted(ord(char) for char in _SEPARATORS if char.isascii()))
_ASCII_VISIBLE = bytes(code for code in range(0x80) if chr(code) not in _INVISIBLE_CHARS)
_MARKER_BYTES = MARKER_WORD.lower().encode()
# Role-token starts in the filter fold: `<|`, `[INST]`, `<<SYS>>`, the tags; `/` optional.
# Written out without `/?`: an optional item costs the regex engine a repeat at every `<`,
# and raw HTML has thousands of them (2.4x slower on the fetch benchmark's page).
_TOKEN_WORDS = rb"sys|tool|function|start|end|inst\]"
_TOKEN_START = re.compile(rb"<(?:\||/(?:" + _TOKEN_WORDS + rb")|" + _TOKEN_WORDS + rb")")

# The light filter's searches (RE2: one pass at C speed whatever the text; Python's re stops
# at every `<` of an HTML page and costs several times the fold it would spare). Patterns
# are UTF-8, so the non-ASCII separators are whole characters. Separators between the marker
# word's letters are skipped, as the tight fold drops them; a role token's start must be
# written in a row, as the careful path's light fold needs it.
_SEPARATOR_CLASS = "[" + "".join(f"\\x{{{ord(char):X}}}" for char in sorted(_SEPARATORS)) + "]*"
_LIGHT_MARKER = re2.compile(_SEPARATOR_CLASS.join(MARKER_WORD.lower()).encode())
# Role-token starts as the careful path's light fold has them, one search per first byte: RE2
# skips to a pattern's first byte with memchr, where a choice of first bytes runs the automaton
# over every byte (ten times slower on an HTML page).
_LIGHT_TAG_WORDS = rb"(?:\||/?(?:sys|tool|function|start|end))"
_LIGHT_TOKENS = (
    re2.compile(rb"<" + _LIGHT_TAG_WORDS),
    re2.compile(rb"&(?:lt|#0*60|#x0*3c);?" + _LIGHT_TAG_WORDS),
    re2.compile(rb"\[/?inst\]"),
)
_ENTITY_OPEN = re.compile(rb"&(?:lt|#0*60|#x0*3c);?")
_FILTER_REPLACEMENTS: dict[str, bytes] = {}
_REPLACE_ONE_BY_ONE = 24  # distinct characters replaced with bytes.replace, one pass each


def _filter_fold(data: bytes, special: frozenset[str]) -> bytes:
    delete = _ASCII_SEPARATOR_BYTES
    replaced: dict[str, bytes] = {}
    for char in special:
        replacement = _filter_replacement(char)
        if replacement:
            replaced[char] = replacement
        else:
            # Deleting a separator's bytes everywhere may also cut other characters to pieces
            # or to nothing: those pieces match nothing, and nothing only adds candidates.
            delete += char.encode()
    if len(replaced) <= _REPLACE_ONE_BY_ONE:
        for char, replacement in replaced.items():
            data = data.replace(char.encode(), replacement)
    else:
        # Each bytes.replace is a pass over the text: with many distinct characters (a page
        # can hold all of them), one slower str.translate pass keeps the cost linear.
        table = {ord(char): replacement.decode() for char, replacement in replaced.items()}
        data = data.decode().translate(table).encode()
    folded = data.translate(_TIGHT_TABLE, delete)
    if _may_hold_entity(folded):
        folded = _ENTITY_OPEN.sub(b"<", folded)
    return folded


_ENTITY_LOOKS = 32  # ampersands looked at one by one before the whole-text substitution


def _may_hold_entity(folded: bytes) -> bool:
    """Whether `folded` may hold a reference `_ENTITY_OPEN` folds. The regex walks the text
    byte by byte to find `&`; bytes.find uses memchr, and most pages have few ampersands."""
    index = folded.find(b"&")
    for _ in range(_ENTITY_LOOKS):
        if index < 0:
            return False
        if _ENTITY_OPEN.match(folded, index):
            return True
        index = folded.find(b"&", index + 1)
    return index >= 0


def _filter_replacement(char: str) -> bytes:
    replacement = _FILTER_REPLACEMENTS.get(char)
    if replacement is None:
        pieces = []
        for folded in _fold_char(char):
            if folded in _FILTER_RELEVANT:
                pieces.append(folded.lower())
            elif folded not in _SEPARATORS:
                pieces.append("?")  # matches nothing, as the careful fold's character does
        replacement = "".join(pieces).encode()
        _FILTER_REPLACEMENTS[char] = replacement
    return replacement


def _filter_candidates(inventory: _Inventory) -> list[int]:
    """The lines the careful path must run on: found without a fold when the only special
    characters in the text are separators (most pages), else in the filter fold."""
    if inventory.special <= _SEPARATORS:
        lines = _light_candidate_lines(inventory.data)
        if lines is not None:
            return lines
    return _candidate_lines(_filter_fold(inventory.data, inventory.special))


def _candidate_lines(folded: bytes) -> list[int]:
    """The numbers of the lines in which the filter fold has a marker word or a token start."""
    lines = _lines_with(folded, [_find_marker_word, _search_start(_TOKEN_START)])
    assert lines is not None  # no limit given
    return lines


def _find_marker_word(folded: bytes, position: int) -> int:
    return folded.find(_MARKER_BYTES, position)


# Each RE2 search costs microseconds through its Python binding, where bytes.find costs a
# fraction of one: a text with more candidate lines than this (forgeries every few lines)
# goes to the fold, whose per-line searches are cheaper.
_LIGHT_LINES_MAX = 16


def _light_candidate_lines(data: bytes) -> list[int] | None:
    """`_candidate_lines` for a text whose only special characters are separators, searched
    without a fold: its bytes lower-cased, by automata that skip separators between the
    marker word's letters and read references for `<` as `<` themselves. None past
    `_LIGHT_LINES_MAX` lines."""
    searches = [_search_start(pattern) for pattern in (_LIGHT_MARKER, *_LIGHT_TOKENS)]
    return _lines_with(data.lower(), searches, most=_LIGHT_LINES_MAX)


def _search_start(pattern: re.Pattern[bytes] | re2._Regexp) -> Callable[[bytes, int], int]:
    def start(text: bytes, position: int) -> int:
        found = pattern.search(text, position)
        return -1 if found is None else found.start()

    return start


def _lines_with(
    text: bytes, searches: Sequence[Callable[[bytes, int], int]], *, most: int | None = None
) -> list[int] | None:
    """The numbers of the lines of `text` in which any of the searches finds something, or
    None when there are more than `most`.

    Each search runs again only once its last hit is behind, so the whole is linear."""
    lines: list[int] = []
    line = 0  # the number of the line holding text[counted]
    counted = 0
    hits = [search(text, 0) for search in searches]
    while True:
        position = min((hit for hit in hits if hit >= 0), default=-1)
        if position < 0:
            return lines
        line += text.count(b"\n", counted, position)
        lines.append(line)
        if most is not None and len(lines) > most:
            return None
        # One hit is enough for a line: go on from its end.
        counted = text.find(b"\n", position)
        if counted < 0:
            return lines
        hits = [
            search(text, counted) if 0 <= hit < counted else hit
            for hit, search in zip(hits, searches, strict=True)
        ]


def _is_filter_special(char: str) -> bool:
    folded = _fold_uncached(char)
    return any(c in _FILTER_RELEVANT for c in folded) or all(c in _SEPARATORS for c in folded)


def _derive_filter_special_ranges() -> tuple[tuple[int, int], ...]:
    """The table above from this Python's unicodedata (about two seconds): NFKC's part; the
    confusables and kept ignorables are added to it (`_FOLD_EXTRAS`)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        if (
            code not in _BRACKET_FOLD
            and char not in _SEPARATORS
            and char.upper() == char
            and unicodedata.is_normalized("NFKC", char)
        ):
            continue  # its fold is itself: neither relevant nor a separator
        if _nfkc_special(char):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return tuple(ranges)


def _char_class(ranges: Sequence[tuple[int, int]]) -> str:
    return "".join(
        re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}"
        for low, high in ranges
    )


# Code point -> fold, in the form str.translate reads; bounded, so text cannot grow it.
_FOLD_TABLE: dict[int, str] = {}
_FOLD_TABLE_MAX = 65536


def _fold_char(char: str) -> str:
    folded = _FOLD_TABLE.get(ord(char))
    if folded is None:
        folded = _fold_uncached(char)
        if len(_FOLD_TABLE) < _FOLD_TABLE_MAX:
            _FOLD_TABLE[ord(char)] = folded
    return folded


def _fold_uncached(char: str) -> str:
    if char in _KEPT_IGNORABLE:
        return "-"  # a separator: dropped by the tight fold, a word break in the light one
    folded = unicodedata.normalize("NFKC", char.translate(_BRACKET_FOLD)).translate(_BRACKET_FOLD)
    # Confusables before and after upper-casing: a look-alike of either case is the letter.
    return folded.translate(_CONFUSABLE_FOLD).upper().translate(_CONFUSABLE_FOLD)


def _nfkc_special(char: str) -> bool:
    """Whether `char` is special by NFKC and the brackets alone (the derived table's rule)."""
    if char in _KEPT_IGNORABLE:
        return False
    folded = unicodedata.normalize("NFKC", char.translate(_BRACKET_FOLD))
    folded = folded.translate(_BRACKET_FOLD).upper()
    return any(c in _FILTER_RELEVANT for c in folded) or all(c in _SEPARATORS for c in folded)


@dataclass(frozen=True, slots=True)
class _FoldedLine:
    """A line's light fold; unit k stands for original characters starts[k]:ends[k]."""

    text: str
    starts: Sequence[int]
    ends: Sequence[int]


def _fold_line(line: str) -> _FoldedLine:
    if line.isascii():
        light = line.upper()
    else:
        for code in set(map(ord, line)).difference(_FOLD_TABLE):
            _fold_char(chr(code))
        if len(_FOLD_TABLE) < _FOLD_TABLE_MAX:
            light = line.translate(_FOLD_TABLE)  # every character of the line is in the table
        else:
            light = "".join(map(_fold_char, line))
    if len(light) == len(line):
        # No fold is empty, so equal lengths mean one folded character per original one.
        starts: Sequence[int] = range(len(line))
        ends: Sequence[int] = range(1, len(line) + 1)
    else:
        starts = [index for index, char in enumerate(line) for _ in _fold_char(char)]
        ends = [start + 1 for start in starts]
    if "&" not in light:
        return _FoldedLine(light, starts, ends)

    # Collapse each character reference for < or > into one unit spanning the whole reference.
    out: list[str] = []
    new_starts: list[int] = []
    new_ends: list[int] = []
    position = 0
    for match in _ENTITY.finditer(light):
        out.append(light[position : match.start()])
        new_starts.extend(starts[position : match.start()])
        new_ends.extend(ends[position : match.start()])
        opening = match.group(1) or match.group(3) or match.group(5)
        out.append("<" if opening else ">")
        new_starts.append(starts[match.start()])
        new_ends.append(ends[match.end() - 1])
        position = match.end()
    out.append(light[position:])
    new_starts.extend(starts[position:])
    new_ends.extend(ends[position:])
    return _FoldedLine("".join(out), new_starts, new_ends)


def _neutralise_line(line: str) -> tuple[str, int]:
    folded = _fold_line(line)
    light = folded.text
    replace: dict[int, tuple[int, str]] = {}  # original start -> (original end, replacement)
    insert: set[int] = set()  # original positions that get a `·` in front
    count = 0

    def neutral_bracket(unit: int) -> None:
        char = light[unit]
        if char in "<>[]":
            neutral = _OPEN_NEUTRAL if char in "<[" else _CLOSE_NEUTRAL
            replace[folded.starts[unit]] = (folded.ends[unit], neutral)

    for match in _ROLE_TOKEN.finditer(light):
        count += 1
        for bracket in _BRACKET_UNIT.finditer(light, match.start(), match.end()):
            neutral_bracket(bracket.start())

    # The tight fold: the light fold without separators.
    tight = light.translate(_DROP_SEPARATORS)
    position = tight.find(MARKER_WORD)
    if position >= 0:
        kept = [
            unit for unit, char in enumerate(light) if char not in _SEPARATORS
        ]  # tight -> light
        while position >= 0:
            count += 1
            start = position
            first_word = _FIRST_WORD
            if position >= len(_END_WORD) and tight.startswith(
                _END_WORD, position - len(_END_WORD)
            ):
                start = position - len(_END_WORD)
                first_word = _END_WORD
            end = position + len(MARKER_WORD)
            _mark_separator(line, folded, kept, start, end, first_word, replace, insert)
            position = tight.find(MARKER_WORD, end)
        for run in re.finditer(r"<{2,}|>{2,}", tight):
            for tight_index in range(run.start(), run.end()):
                neutral_bracket(kept[tight_index])

    if not replace and not insert:
        return line, count
    return _apply(line, replace, insert), count


def _mark_separator(
    line: str,
    folded: _FoldedLine,
    kept: list[int],
    start: int,
    end: int,
    first_word: str,
    replace: dict[int, tuple[int, str]],
    insert: set[int],
) -> None:
    """Turn the first separator of the marker word at tight[start:end] into `·`."""
    first = folded.starts[kept[start]]
    last = folded.ends[kept[end - 1]]
    for index in range(first, last):
        char_fold = _fold_char(line[index])
        # A separator is a whole original character that folds to separators only.
        if char_fold and not char_fold.translate(_DROP_SEPARATORS) and index not in replace:
            replace[index] = (index + 1, _SEPARATOR_NEUTRAL)
            return
    insert.add(folded.ends[kept[start + len(first_word) - 1]])


def _apply(line: str, replace: dict[int, tuple[int, str]], insert: set[int]) -> str:
    out: list[str] = []
    position = 0
    for point in sorted(set(replace) | insert):
        if point < position:
            continue  # inside a reference already replaced as a whole
        out.append(line[position:point])
        position = point
        if point in insert:
            out.append(_SEPARATOR_NEUTRAL)
        if point in replace:
            end, text = replace[point]
            out.append(text)
            position = end
    out.append(line[position:])
    return "".join(out)


if unicodedata.unidata_version != _FILTER_SPECIAL_UNICODE:
    # Another Unicode version may fold other characters: derive the table rather than miss one.
    _FILTER_SPECIAL_RANGES = _derive_filter_special_ranges()
# Each confusable in either case (the fold upper-cases), and the kept ignorables.
_FOLD_EXTRAS = frozenset(
    char
    for source in (*_CONFUSABLE_FOLD, *map(ord, _KEPT_IGNORABLE))
    for char in {chr(source), chr(source).lower(), chr(source).upper()}
    if len(char) == 1 and not char.isascii() and _is_filter_special(char)
)
_FILTER_SPECIAL_CHARS = _FOLD_EXTRAS | frozenset(
    chr(code) for low, high in _FILTER_SPECIAL_RANGES for code in range(low, high + 1)
)
# The BMP part of a class compiles to a bitmap; astral ranges would be tried one by one for
# every character, so the class takes all astral characters and the caller sorts them out.
_NOTABLE = re.compile(
    "["
    + _char_class(
        [
            (low, min(high, 0xFFFF))
            for low, high in _INVISIBLE_RANGES + _FILTER_SPECIAL_RANGES
            if low <= 0xFFFF
        ]
    )
    + "".join(re.escape(char) for char in sorted(_FOLD_EXTRAS) if char <= "\uffff")
    + "\U00010000-\U0010ffff]"
)


# --- source attribute --------------------------------------------------------------------

_SOURCE_SAFE = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;="
)
_HEX = frozenset("0123456789abcdefABCDEF")
# Safe characters, and `%` only where it starts an escape: such a value is its own encoding.
_SOURCE_UNCHANGED = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*")


def _is_escape(value: str, index: int) -> bool:
    return index + 2 < len(value) and value[index + 1] in _HEX and value[index + 2] in _HEX


def _percent_encode(char: str) -> str:
    data = char.encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in data)
