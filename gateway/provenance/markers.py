"""Untrusted-content markers (contract 5.5): nonces, the sanitiser, wrapping and unwrapping.

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
   as `«` and `《` to `<<`), NFKC, upper case; HTML references for `<`/`>` (`&lt;`, `&#60;`,
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
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

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
_OTHER_SEPARATORS = frozenset(
    char for char in _SEPARATORS if not char.isspace() and char not in "_-"
)
_BRACKET_LOOKALIKE = re.compile("[" + re.escape("".join(chr(code) for code in _BRACKET_FOLD)) + "]")

_INVISIBLE_CHARS = frozenset(
    chr(code)
    for low, high in (
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
    for code in range(low, high + 1)
)
_ASCII_INVISIBLE = bytes(sorted(ord(char) for char in _INVISIBLE_CHARS if ord(char) < 0x80))
_JOINERS = frozenset("\u200c\u200d")

_ENTITY = re.compile(r"&(?:(LT)|(GT)|#0*(?:(60)|(62))|#X0*(?:(3C)|(3E)));?")

_ROLE_TOKEN = re.compile(
    r"<\|[^\s|<>]{1,64}\|>"
    r"|\[/?INST\]"
    r"|<</?SYS>>"
    r"|</?(?:TOOL[_ -]?RESULTS?|FUNCTION[_ -]?RESULTS?|FUNCTION[_ -]?CALLS?|TOOL[_ -]?CALLS?"
    r"|TOOL[_ -]?USE|TOOL[_ -]?RESPONSE|START[_ -]?OF[_ -]?TURN|END[_ -]?OF[_ -]?TURN"
    r"|SYSTEM[_ -]?REMINDER)(?:\s[^<>\n]{0,256})?/?>"
)
# A loose pre-check on a whole-text fold: every line _ROLE_TOKEN can match contains one of these.
_ROLE_HINT = re.compile(r"<\||\[/?INST\]|<</?SYS>>|</?(?:TOOL|FUNCTION|START|END|SYSTEM)")

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


def new_nonce() -> str:
    """128 random bits as 32 lowercase hex digits, one per response."""
    return secrets.token_hex(16)


def sanitize(text: str) -> Sanitized:
    """Remove invisible characters, then neutralise marker look-alikes and role tokens."""
    visible, invisible = _remove_invisible(text)
    neutral, lookalikes = _neutralise(visible)
    return Sanitized(neutral, lookalikes, invisible)


def source_attribute(url_or_name: str) -> str:
    """`url_or_name` percent-encoded so it cannot end the `source="…"` attribute or the line.

    Existing `%XX` escapes are kept, so the function is idempotent; at most 2048 characters.
    """
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


# --- invisible characters ----------------------------------------------------------------


def _remove_invisible(text: str) -> tuple[str, int]:
    # str.find per distinct invisible character runs at C speed; a regex scan over a large
    # character class would cost tens of nanoseconds per character of ordinary text.
    if text.isascii() and len(text.encode().translate(None, _ASCII_INVISIBLE)) == len(text):
        return text, 0
    present = _INVISIBLE_CHARS.intersection(text)
    if not present:
        return text, 0
    positions: list[int] = []
    for char in present:
        index = text.find(char)
        while index >= 0:
            positions.append(index)
            index = text.find(char, index + 1)
    positions.sort()

    out: list[str] = []
    removed = 0
    copied = 0  # text[:copied] is handled
    run_start = 0
    for number, position in enumerate(positions):
        if number == 0 or position != positions[number - 1] + 1:
            run_start = position
        if number + 1 < len(positions) and positions[number + 1] == position + 1:
            continue  # the run goes on
        run_end = position + 1
        run = text[run_start:run_end]
        kept = ""
        joiner = next((char for char in run if char in _JOINERS), None)
        if joiner is not None:
            before = text[run_start - 1] if run_start > 0 else ""
            after = text[run_end] if run_end < len(text) else ""
            if _joins(before, after):
                kept = joiner
        # A CR ending a CRLF line break is removed but not counted: it hides nothing.
        line_ending = run.endswith("\r") and text.startswith("\n", run_end)
        removed += len(run) - len(kept) - line_ending
        out.append(text[copied:run_start])
        out.append(kept)
        copied = run_end
    out.append(text[copied:])
    return "".join(out), removed


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


def _is_emoji(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _EMOJI_RANGES)


# --- marker look-alikes ------------------------------------------------------------------


def _neutralise(text: str) -> tuple[str, int]:
    if not _may_hold_lookalikes(text):
        return text, 0
    lines = text.split("\n")
    total = 0
    for number, line in enumerate(lines):
        if _may_hold_lookalikes(line):
            lines[number], count = _neutralise_line(line)
            total += count
    return "\n".join(lines), total


def _may_hold_lookalikes(text: str) -> bool:
    """A cheap gate at C speed: False only if no line of `text` holds a look-alike.

    NFKD rather than the careful fold's per-character NFKC: it never composes an ASCII
    character with the mark after it, so it finds at least every match the careful fold finds.
    """
    if text.isascii():
        light = text.upper()
    else:
        text = _fold_brackets(text)
        # U+2329 decomposes to U+3008, itself a look-alike, so fold again.
        light = _fold_brackets(unicodedata.normalize("NFKD", text))
        light = light.upper()
    tight = "".join(light.split()).replace("_", "").replace("-", "")
    if not tight.isascii():
        for separator in _OTHER_SEPARATORS:
            if separator in tight:
                tight = tight.replace(separator, "")
    if MARKER_WORD in tight:
        return True
    if "&" in light:
        light = _ENTITY.sub("<", light)  # the direction does not matter for the hint
    return _ROLE_HINT.search(light) is not None


def _fold_brackets(text: str) -> str:
    # str.translate with a dict is slow on non-ASCII text; a regex finds the rare look-alikes.
    return _BRACKET_LOOKALIKE.sub(lambda match: _BRACKET_FOLD[ord(match.group())], text)


_FOLD_CACHE: dict[str, str] = {}


def _fold_char(char: str) -> str:
    folded = _FOLD_CACHE.get(char)
    if folded is None:
        folded = unicodedata.normalize("NFKC", char.translate(_BRACKET_FOLD))
        folded = folded.translate(_BRACKET_FOLD).upper()
        if len(_FOLD_CACHE) < 65536:
            _FOLD_CACHE[char] = folded
    return folded


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
        folds = list(map(_fold_char, line))
        light = "".join(folds)
    if len(light) == len(line):
        # No fold is empty, so equal lengths mean one folded character per original one.
        starts: Sequence[int] = range(len(line))
        ends: Sequence[int] = range(1, len(line) + 1)
    else:
        starts = [index for index, fold in enumerate(folds) for _ in fold]
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
        for unit in range(match.start(), match.end()):
            neutral_bracket(unit)

    # The tight fold: the light fold without separators, each char pointing at its light unit.
    kept = [unit for unit, char in enumerate(light) if char not in _SEPARATORS]
    tight = "".join(light[unit] for unit in kept)
    position = tight.find(MARKER_WORD)
    if position >= 0:
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
        if char_fold and all(c in _SEPARATORS for c in char_fold) and index not in replace:
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


# --- source attribute --------------------------------------------------------------------

_SOURCE_SAFE = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;="
)
_HEX = frozenset("0123456789abcdefABCDEF")


def _is_escape(value: str, index: int) -> bool:
    return index + 2 < len(value) and value[index + 1] in _HEX and value[index + 2] in _HEX


def _percent_encode(char: str) -> str:
    data = char.encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in data)
