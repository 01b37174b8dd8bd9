"""page_byline(): each way a page marks who wrote it and when, and what is not a byline."""

from __future__ import annotations

import json

import pytest
from lxml import etree

from gateway.extract.byline import MAX_NAME_CHARS, Byline, page_byline


def root_of(head: str, body: str) -> etree._Element:
    html = f"<html><head>{head}</head><body>{body}</body></html>".encode()
    return etree.fromstring(html, etree.HTMLParser(encoding="utf-8"))


def ld(value: object) -> str:
    return f'<script type="application/ld+json">{json.dumps(value)}</script>'


CASES = [
    pytest.param(ld({"@type": "NewsArticle", "author": {"@type": "Person", "name": "Ada Lovelace"},
                     "datePublished": "2025-09-04T07:30:00Z"}), "", False,
                 Byline(("Ada Lovelace",), "2025-09-04"), id="json-ld-article"),
    pytest.param(ld({"@graph": [{"@type": "WebPage"}, {"@type": ["BlogPosting"], "author": [
        {"name": "Ada Lovelace"}, {"name": "Charles Babbage"}, "By Mary Somerville"],
        "datePublished": "4 September 2025"}]}), "", False,
        Byline(("Ada Lovelace", "Charles Babbage", "Mary Somerville"), "4 September 2025"),
        id="json-ld-graph-authors"),
    pytest.param(ld({"@type": "Product", "author": {"name": "Shop"}}), "", True, None,
                 id="json-ld-not-an-article"),
    pytest.param("", '<article itemscope itemtype="https://schema.org/Article">'
                 '<span itemprop="author" itemscope><span itemprop="name">Ada Lovelace</span></span>'
                 '<meta itemprop="datePublished" content="2025-09-04"></article>', True,
                 Byline(("Ada Lovelace",), "2025-09-04"), id="microdata"),
    pytest.param('<meta property="og:type" content="article">',
                 '<p>By <a rel="author" href="/ada">Ada Lovelace</a></p>'
                 '<time datetime="2025-09-04T08:00">Thursday</time>', True,
                 Byline(("Ada Lovelace",), "2025-09-04"), id="rel-author-and-time"),
    pytest.param("", '<div class="post-byline">Written by Ada Lovelace</div>', True,
                 Byline(("Ada Lovelace",), None), id="byline-class"),
    pytest.param('<meta property="article:published_time" content="2025-09-04T08:00:00Z">', "",
                 True, Byline((), "2025-09-04"), id="published-time-meta"),
    pytest.param("", '<nav><a rel="author" href="/a">Site Team</a><time>2020-01-01</time></nav>'
                 '<footer><span class="author">Webmaster</span></footer>', True, None,
                 id="navigation-and-footer-are-not-bylines"),
    pytest.param("", '<div class="comment"><span class="author">Bob</span>'
                 '<time datetime="2025-01-01">then</time></div>', False, None,
                 id="not-an-article-no-markup-read"),
    pytest.param("", f'<span class="author">{"x" * (MAX_NAME_CHARS + 1)}</span>'
                 '<a rel="author" href="/u">https://site.example/u</a>', True, None,
                 id="long-or-address-names-dropped"),
    pytest.param('<script type="application/ld+json">{"@type": "Article", "author": </script>',
                 "", False, None, id="broken-json-ld"),
]


@pytest.mark.parametrize(("head", "body", "article", "expected"), CASES)
def test_page_byline(head: str, body: str, article: bool, expected: Byline | None) -> None:
    assert page_byline(root_of(head, body), article) == expected


@pytest.mark.parametrize(
    ("byline", "line"),
    [
        (Byline(("Ada Lovelace",), "2025-09-04"), "By Ada Lovelace · 2025-09-04"),
        (Byline(("A", "B", "C"), None), "By A, B and C"),
        (Byline((), "2025-09-04"), "2025-09-04"),
    ],
)
def test_line(byline: Byline, line: str) -> None:
    assert byline.line() == line


def test_deeply_nested_json_ld_is_bounded() -> None:
    article = json.dumps({"@type": "Article", "author": {"name": "Ada Lovelace"}})
    script = f'<script type="application/ld+json">{"[" * 5000}{article}{"]" * 5000}</script>'
    # json refuses the depth (RecursionError) or the walk stops at its bound: no crash, no hang
    assert page_byline(root_of(script, ""), False) in (None, Byline(("Ada Lovelace",), None))
