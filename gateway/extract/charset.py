"""Which character encoding a body is in, and its decoding: never raises, never guesses wildly.

Order: a byte-order mark, the `charset=` of the Content-Type, then for HTML a `<meta>` in the
first 4 KB (for XML its declaration), then UTF-8. Broken bytes become U+FFFD.
"""

from __future__ import annotations

import codecs
import re

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Labels that browsers (WHATWG Encoding) read as windows-1252, which is a superset of them:
# servers say "iso-8859-1" and send curly quotes.
_WINDOWS_1252_LABELS = frozenset(
    {"ascii", "us-ascii", "iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "cp819",
     "ibm819", "iso-ir-100", "csisolatin1", "iso_8859-1", "x-cp1252", "windows-1252"}
)

# Python codecs that are not character sets of web content: escapes and transforms an upstream
# could name to make us rewrite its text, and UTF-7 (banned by WHATWG for smuggling markup).
_REFUSED_CODECS = frozenset(
    {"idna", "punycode", "unicode-escape", "raw-unicode-escape", "utf-7", "undefined",
     "mbcs", "oem", "charmap", "palmos"}
)

_HEADER_CHARSET = re.compile(rb"""charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]{1,40})""", re.I)
_META_CHARSET = re.compile(
    rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]{1,40})""", re.I
)
_XML_DECLARATION = re.compile(
    rb"""^\s*<\?xml[^>]{0,200}?encoding\s*=\s*["']([A-Za-z0-9._:\-]{1,40})["']"""
)

SNIFF_BYTES = 4096


def media_type(content_type: str) -> str:
    """The bare, lower-case media type of a Content-Type value ("" when absent)."""
    return content_type.split(";", 1)[0].strip().lower()


def is_html_type(mtype: str) -> bool:
    return mtype in ("text/html", "application/xhtml+xml")


def is_xml_type(mtype: str) -> bool:
    return mtype in ("text/xml", "application/xml") or mtype.endswith("+xml")


def codec_for(label: str | bytes | None) -> str | None:
    """Python's codec name for a charset label, or None when unknown or refused."""
    if label is None:
        return None
    if isinstance(label, bytes):
        label = label.decode("ascii", "replace")
    label = label.strip().strip("\"'").lower()
    if not label:
        return None
    if label in _WINDOWS_1252_LABELS:
        return "cp1252"
    try:
        info = codecs.lookup(label)
    except (LookupError, ValueError):
        return None
    name = info.name
    # bytes-to-bytes and str-to-str codecs (base64, zlib, rot13) are no character sets
    if not getattr(info, "_is_text_encoding", True):
        return None
    if name in _REFUSED_CODECS or name.replace("_", "-") in _REFUSED_CODECS:
        return None
    return name


def bom_codec(body: bytes) -> tuple[str, int] | None:
    """The codec a byte-order mark names and the mark's length."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    return None


def sniff_encoding(body: bytes, content_type: str) -> tuple[str, int]:
    """(codec, bytes of BOM to skip) for a body served with this Content-Type.

    The BOM wins over the header, as in browsers (WHATWG "decode"): a document whose first
    bytes say UTF-16 is UTF-16 whatever a proxy labelled it.
    """
    bom = bom_codec(body)
    if bom is not None:
        return bom
    match = _HEADER_CHARSET.search(content_type.encode("latin-1", "replace"))
    if match:
        codec = codec_for(match.group(1))
        if codec is not None:
            return codec, 0
    mtype = media_type(content_type)
    head = body[:SNIFF_BYTES]
    if is_html_type(mtype) or (mtype in ("", "application/octet-stream") and looks_like_html(head)):
        match = _META_CHARSET.search(head)
        if match:
            codec = codec_for(match.group(1))
            # A <meta> that we could read as ASCII cannot be telling the truth about UTF-16/32.
            if codec is not None and not codec.startswith("utf-16") and not codec.startswith(
                "utf-32"
            ):
                return codec, 0
    elif is_xml_type(mtype):
        match = _XML_DECLARATION.match(head)
        if match:
            codec = codec_for(match.group(1))
            if codec is not None:
                return codec, 0
    return "utf-8", 0


_HTML_START = re.compile(
    rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)


def looks_like_html(head: bytes) -> bool:
    """Whether a body begins as an HTML document does (for bodies whose type is missing)."""
    return _HTML_START.match(head[:1024]) is not None


# Codecs that read ASCII bytes as ASCII: a pure-ASCII body in one of them is its own UTF-8.
_ASCII_SUPERSETS = frozenset({"utf-8", "cp1252", "ascii", "iso8859-1", "iso8859-15"})


def decode_text(body: bytes, content_type: str) -> str:
    """The body as text; undecodable bytes become U+FFFD, so this never raises."""
    return decode_text_utf8(body, content_type)[0]


def decode_text_utf8(body: bytes, content_type: str) -> tuple[str, bytes | None]:
    """The body as text, and that text's UTF-8 encoding when the body already holds it.

    A valid UTF-8 body (after its BOM) is its own text's encoding: callers that need the
    encoding (the sanitiser, hashing) then skip encoding 100 KB again.
    """
    codec, skip = sniff_encoding(body, content_type)
    data = body[skip:] if skip else body
    if codec == "utf-8" or (codec in _ASCII_SUPERSETS and data.isascii()):
        try:
            return data.decode("utf-8"), data
        except UnicodeDecodeError:
            pass  # broken bytes: replaced below, and the text is no longer the body
    try:
        return data.decode(codec, errors="replace"), None
    except (LookupError, ValueError):  # a codec that decodes differently than it looked up
        return data.decode("utf-8", errors="replace"), None
