"""Whole pages through extract(), one per construct a reader of the Markdown needs: the page
in `pages/NAME.html`, what `auto` must give in `NAME.md` and what `text` must give in
`NAME.txt` (golden files: a change to either shows in review as a diff of the expected text).

- heading: the main `<h1>` once on top, though the title repeats it and a logo is an `<h1>`
- byline: `rel=author` and `<time>` as one line under the heading, not again in the body
- images: `![alt](url)` for described pictures in the content (lazy `data-src` too); nothing
  for spacers, pixels, images without alt text, or pictures outside the content
- figcaption: a figure's picture, then its caption as an italic line
- definitions: `term`, then `: definition` lines (grouped terms, `<div>` groups)
- tables: header rows (two, read together), `colspan`, `rowspan`, foot last, caption above;
  a table without a header gets an empty one
- code: fenced blocks with the language the page names; inline code
- lists: nested lists at their depth, ordered lists from their `start`
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.extract import extract

PAGES = Path(__file__).parent / "pages"
BASE_URL = "https://pages.example/guides/page.html"
NAMES = sorted(path.stem for path in PAGES.glob("*.html"))


def test_every_construct_has_its_page() -> None:
    assert NAMES == [
        "byline", "code", "definitions", "figcaption", "heading", "images", "lists", "tables",
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("mode", "suffix"), [("auto", ".md"), ("text", ".txt")])
def test_page(name: str, mode: str, suffix: str) -> None:
    body = (PAGES / f"{name}.html").read_bytes()
    document = extract(body, "text/html; charset=utf-8", mode, base_url=BASE_URL)
    expected = (PAGES / f"{name}{suffix}").read_text(encoding="utf-8")
    assert document.text + "\n" == expected


@pytest.mark.parametrize("mode", ["auto", "text"])
def test_heading_and_byline_are_reported_apart_too(mode: str) -> None:
    body = (PAGES / "byline.html").read_bytes()
    document = extract(body, "text/html", mode)
    assert document.heading == "Night trains return to the valley line"
    assert document.byline == "By Ada Lovelace · 2025-09-04"
    assert document.headings[0] == (1, document.heading)
    assert document.text.count("Ada Lovelace") == 1


def test_text_mode_keeps_the_words_of_the_markdown() -> None:
    """The same content in both modes: text has every word Markdown has outside its syntax
    (link and image targets, fence languages) and image alt texts, and no other (a header
    cell spanning columns is named once per column in Markdown, once in text)."""
    for name in NAMES:
        body = (PAGES / f"{name}.html").read_bytes()
        markdown = extract(body, "text/html", "auto").text
        text = extract(body, "text/html", "text").text
        markdown = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", markdown)
        markdown = re.sub(r"\]\([^)]*\)", "]", markdown)
        markdown = re.sub(r"^```\w+$", "```", markdown, flags=re.M)
        assert set(re.findall(r"\w+", markdown)) == set(re.findall(r"\w+", text)), name
