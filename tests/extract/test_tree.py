"""Parsing and page metadata: title and description preference, caps, odd documents."""

from __future__ import annotations

import pytest
from lxml import etree

from gateway.extract.tree import page_description, page_title, parse_html, text_length


def root_of(html: str) -> etree._Element:
    root = parse_html(html.encode(), "text/html; charset=utf-8")
    assert root is not None
    return root


TITLE_CASES = [
    pytest.param('<meta property="og:title" content="OG"><title>Doc | Site</title>', "OG",
                 id="og-title-first"),
    pytest.param('<meta name="twitter:title" content="TW"><title>Doc</title>', "TW",
                 id="twitter-title"),
    pytest.param("<title>\n  Doc \t title\n</title><h1>H</h1>", "Doc title", id="title-squashed"),
    pytest.param("<title> </title><body><h1>Heading <b>one</b></h1></body>", "Heading one",
                 id="h1-fallback"),
    pytest.param('<meta property="og:title" content=""><title>T</title>', "T",
                 id="empty-og-ignored"),
    pytest.param("<body><p>no title</p></body>", None, id="none"),
    pytest.param("<title>" + "x" * 5000 + "</title>", "x" * 1000, id="capped"),
]


@pytest.mark.parametrize(("html", "title"), TITLE_CASES)
def test_page_title(html: str, title: str | None) -> None:
    assert page_title(root_of(html)) == title


DESCRIPTION_CASES = [
    pytest.param('<meta name="description" content="Plain."><meta property="og:description" '
                 'content="OG.">', "Plain.", id="meta-description-first"),
    pytest.param('<meta property="og:description" content=" OG  text ">', "OG text", id="og"),
    pytest.param('<meta name="DESCRIPTION" content="Upper">', "Upper", id="case-insensitive"),
    pytest.param("<title>x</title>", None, id="none"),
]


@pytest.mark.parametrize(("html", "description"), DESCRIPTION_CASES)
def test_page_description(html: str, description: str | None) -> None:
    assert page_description(root_of(html)) == description


def test_parse_uses_the_sniffed_charset_not_a_later_meta() -> None:
    body = '<meta charset="iso-8859-1"><p>café</p>'.encode()
    root = parse_html(body, "text/html; charset=utf-8")
    assert root is not None and "café" in "".join(root.itertext())


def test_parse_decodes_legacy_charsets() -> None:
    root = parse_html('<p>Привет</p>'.encode("cp1251"), "text/html; charset=windows-1251")
    assert root is not None and "Привет" in "".join(root.itertext())


@pytest.mark.parametrize("body", [b"", b"  \n\t ", b"\x00"], ids=["empty", "blank", "nul"])
def test_nothing_to_parse(body: bytes) -> None:
    root = parse_html(body, "text/html")
    assert root is None or "".join(root.itertext()).strip("\x00\ufffd ") == ""


def test_text_length_counts_collapsed_whitespace() -> None:
    assert text_length(root_of("<p>  a \n\n b\u00a0 c </p>")) == len("a b c")
