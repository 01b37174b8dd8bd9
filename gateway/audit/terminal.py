"""Making attacker-controlled log fields (URLs, titles, domains, reasons) safe to print on a
terminal: escape sequences and control, bidi and invisible characters are stripped.
"""

from __future__ import annotations

import re

# CSI, OSC, DCS/SOS/PM/APC strings, two-byte escapes, and the 8-bit CSI.
_ESCAPE_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
)
_WHITESPACE_CONTROLS = re.compile(r"[\t\n\r\x0b\x0c\x85\u2028\u2029]+")
# C0/C1 controls, DEL, zero-width and bidi controls (which can reorder what a reviewer sees),
# the BOM, and lone surrogates (which cannot even be encoded for output).
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)


def printable(value: object, limit: int = 300) -> str:
    """One line of plain text; `-` for a missing value; cut to `limit` characters."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    text = _ESCAPE_SEQUENCES.sub("", text)
    text = _WHITESPACE_CONTROLS.sub(" ", text)
    text = _INVISIBLE.sub("", text)
    if len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text
