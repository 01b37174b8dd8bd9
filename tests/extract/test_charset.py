"""Charset sniffing and decoding: BOM, header, <meta>, XML declaration, fallbacks."""

from __future__ import annotations

import codecs

import pytest

from gateway.extract import decode_text
from gateway.extract.charset import codec_for, sniff_encoding

CAFE_LATIN1 = "café “quoted”".encode("cp1252")
CAFE = "café “quoted”"

DECODE_CASES = [
    pytest.param(CAFE.encode(), "text/plain; charset=utf-8", CAFE, id="header-utf8"),
    pytest.param(CAFE_LATIN1, "text/plain; charset=windows-1252", CAFE, id="header-cp1252"),
    pytest.param(CAFE_LATIN1, 'text/plain; charset="ISO-8859-1"', CAFE,
                 id="header-latin1-quoted-read-as-windows-1252"),
    pytest.param("привет".encode("koi8-r"), "text/plain;charset=KOI8-R", "привет",
                 id="header-koi8r"),
    pytest.param(codecs.BOM_UTF8 + CAFE.encode(), "text/plain", CAFE, id="bom-utf8-stripped"),
    pytest.param(codecs.BOM_UTF16_LE + CAFE.encode("utf-16-le"), "text/plain", CAFE,
                 id="bom-utf16le"),
    pytest.param(codecs.BOM_UTF16_BE + CAFE.encode("utf-16-be"), "text/plain", CAFE,
                 id="bom-utf16be"),
    pytest.param(codecs.BOM_UTF8 + CAFE.encode(), "text/plain; charset=iso-8859-1", CAFE,
                 id="bom-beats-header"),
    pytest.param(b'<meta charset="windows-1252"><p>' + CAFE_LATIN1, "text/html",
                 '<meta charset="windows-1252"><p>' + CAFE, id="meta-charset"),
    pytest.param(
        b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">' + CAFE_LATIN1,
        "text/html",
        '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">' + CAFE,
        id="meta-http-equiv",
    ),
    pytest.param(b'<meta charset="iso-8859-1">' + CAFE.encode(), "text/html; charset=utf-8",
                 '<meta charset="iso-8859-1">' + CAFE, id="header-beats-meta"),
    pytest.param(b" " * 5000 + b'<meta charset="iso-8859-1">\xe9', "text/html",
                 " " * 5000 + '<meta charset="iso-8859-1">\ufffd', id="meta-after-4kb-ignored"),
    pytest.param(b'<meta charset="utf-16"><p>\xc3\xa9', "text/html",
                 '<meta charset="utf-16"><p>é', id="meta-utf16-means-utf8"),
    pytest.param(b'<meta charset="iso-8859-1">\xe9', "text/plain",
                 '<meta charset="iso-8859-1">\ufffd', id="meta-ignored-for-plain-text"),
    pytest.param(b'<?xml version="1.0" encoding="ISO-8859-1"?><a>\xe9</a>', "application/xml",
                 '<?xml version="1.0" encoding="ISO-8859-1"?><a>é</a>', id="xml-declaration"),
    pytest.param(CAFE.encode(), "text/plain; charset=no-such-charset", CAFE,
                 id="unknown-charset-falls-back-to-utf8"),
    pytest.param(b"a+AGE-b", "text/plain; charset=utf-7", "a+AGE-b", id="utf7-refused"),
    pytest.param(b"nopqr", "text/plain; charset=rot13", "nopqr", id="rot13-refused"),
    pytest.param(b"aGk=", "text/plain; charset=base64", "aGk=", id="base64-refused"),
    pytest.param(b"\\u0041", "text/plain; charset=unicode_escape", "\\u0041",
                 id="unicode-escape-refused"),
    pytest.param(b"ok \xff\xfe\xc3( end", "text/plain", "ok \ufffd\ufffd\ufffd( end",
                 id="broken-utf8-replaced"),
    pytest.param(b"\xe9", "text/plain; charset=utf-8", "\ufffd", id="latin1-bytes-as-utf8"),
    pytest.param(b"nul\x00byte", "text/plain", "nul\x00byte", id="nul-kept-as-is"),
    pytest.param(b"", "text/html", "", id="empty"),
    pytest.param(b"ok\x81", "text/plain; charset=shift_jis", "ok\ufffd",
                 id="broken-multibyte"),
]


@pytest.mark.parametrize(("body", "content_type", "expected"), DECODE_CASES)
def test_decode_text(body: bytes, content_type: str, expected: str) -> None:
    assert decode_text(body, content_type) == expected


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        pytest.param("UTF8", "utf-8", id="alias"),
        pytest.param(" utf-8 ", "utf-8", id="spaces"),
        pytest.param("latin1", "cp1252", id="latin1-is-windows-1252"),
        pytest.param("us-ascii", "cp1252", id="ascii-is-windows-1252"),
        pytest.param("shift_jis", "shift_jis", id="shift-jis"),
        pytest.param("", None, id="empty"),
        pytest.param("x" * 100, None, id="long-junk"),
        pytest.param("hex", None, id="bytes-codec"),
        pytest.param("idna", None, id="idna"),
        pytest.param("punycode", None, id="punycode"),
    ],
)
def test_codec_for(label: str, codec: str | None) -> None:
    assert codec_for(label) == codec


def test_bom_length_is_skipped() -> None:
    assert sniff_encoding(codecs.BOM_UTF32_LE + "x".encode("utf-32-le"), "") == ("utf-32-le", 4)
