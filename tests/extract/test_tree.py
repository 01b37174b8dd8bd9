"""Parsing and page metadata: title and description preference, caps, odd documents."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from gateway.extract.tree import (
    DeadlineExceeded,
    SubtreeText,
    main_heading,
    page_description,
    page_title,
    parse_html,
    squash,
    text_length,
    text_of,
)


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


# --- SubtreeText: one walk must answer exactly as measuring each subtree again would --------


def direct_link_length(el: etree._Element) -> float:
    links = 0.0
    for a in el.iter("a"):
        links += text_length(a) * (0.3 if (a.get("href") or "").startswith("#") else 1.0)
    return links


def assert_measures_match(body: etree._Element) -> None:
    measured = SubtreeText(body)
    for el in body.iter(etree.Element):
        assert measured.length(el) == text_length(el), etree.tostring(el)
        assert measured.text(el) == text_of(el), etree.tostring(el)
        # prefix sums add the same weights in another order: equal up to rounding
        assert measured.link_length(el) == pytest.approx(direct_link_length(el)), (
            etree.tostring(el)
        )


def body_with_comments(html: str) -> etree._Element:
    # comments and processing instructions kept: their tails are text, their own text is not
    parser = etree.HTMLParser(remove_comments=False, remove_pis=False)
    root = etree.fromstring(f"<html><body>{html}</body></html>", parser)
    return root.find("body")


MEASURE_CASES = [
    pytest.param("<p>plain words here</p>", id="plain"),
    pytest.param("<p>run<b>on</b>words <i>split</i> apart</p>", id="words-joined-across-tags"),
    pytest.param("<p> lead<b> inner </b>trail </p>", id="edge-spaces"),
    pytest.param("<p>a\u00a0\u00a0b\tc\n\nd\u2028e\u200bf  g</p>", id="odd-whitespace"),
    pytest.param("<div>\n  <p>x</p>\n  <p> </p>\n</div>", id="whitespace-only-pieces"),
    pytest.param("<p></p><div><span></span></div><p>x</p>", id="empty-elements"),
    pytest.param("<p>a<!-- hidden words -->b<?pi no?>c</p>", id="comments-and-pis"),
    pytest.param('<p>see <a href="/x">one link</a>, <a href="#f">a fragment</a> and '
                 '<a>no href</a></p>', id="links-weighted"),
    pytest.param('<div><a href="/o">out<span><a href="/i">in</a></span>er</a></div>',
                 id="nested-links"),
    pytest.param("<table><tr><td>1,2</td><td>x\u060cy</td></tr></table>", id="table-commas"),
    pytest.param("<p>\u00e9t\u00e9 \u2014 caf\u00e9\u3000\u6f22\u5b57</p>", id="non-ascii"),
]


@pytest.mark.parametrize("html", MEASURE_CASES)
def test_subtree_text_matches_direct_measures(html: str) -> None:
    assert_measures_match(body_with_comments(html))


_FRAGMENT_TEXT = st.text(alphabet=" \t\n\u00a0\u2003\u200bab,\u00e9", max_size=6)
_FRAGMENTS = st.recursive(
    _FRAGMENT_TEXT.map(lambda text: text.replace("&", "")),
    lambda inner: st.builds(
        lambda tag, children, tail: f"<{tag}>{''.join(children)}</{tag.split()[0]}>{tail}",
        st.sampled_from(["p", "div", "span", "b", 'a href="/x"', 'a href="#y"', "a", "td"]),
        st.lists(inner, max_size=4),
        _FRAGMENT_TEXT,
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=5))
def test_subtree_text_matches_direct_measures_on_any_tree(fragments: list[str]) -> None:
    assert_measures_match(body_with_comments("".join(fragments) or "<p></p>"))


def remove_keeping_tail(el: etree._Element) -> None:
    """As the content selection removes an element: its tail stays with what came before."""
    parent = el.getparent()
    assert parent is not None
    previous = el.getprevious()
    if el.tail:
        if previous is not None:
            previous.tail = (previous.tail or "") + el.tail
        else:
            parent.text = (parent.text or "") + el.tail
    parent.remove(el)


def assert_remaining_length_matches(body: etree._Element, keep_every: int, drop: int) -> None:
    """Some of body's children kept in a new element, some elements inside them removed:
    `remaining_length` must equal measuring what is left directly."""
    measured = SubtreeText(body)
    container = etree.Element("div")
    kept = [child for index, child in enumerate(body) if index % keep_every == 0]
    for child in kept:
        child.tail = None
        container.append(child)
    inner = [el for el in container.iter(etree.Element) if el is not container and el not in kept]
    removed = []
    # innermost first, as the clean-up goes; a removed element's ancestors may go too
    for index, el in enumerate(reversed(inner + kept)):
        if index % drop == 0 and el.getparent() is not None:
            remove_keeping_tail(el)
            removed.append(el)
    assert measured.remaining_length(kept, removed) == text_length(container), (
        etree.tostring(container)
    )


@pytest.mark.parametrize("html", MEASURE_CASES)
@pytest.mark.parametrize(("keep_every", "drop"), [(1, 2), (2, 3), (1, 1), (3, 5)])
def test_remaining_length_matches_direct_measure(html: str, keep_every: int, drop: int) -> None:
    assert_remaining_length_matches(body_with_comments(html * 3), keep_every, drop)


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, min_size=1, max_size=6), st.integers(1, 3), st.integers(1, 4))
def test_remaining_length_matches_direct_measure_on_any_tree(
    fragments: list[str], keep_every: int, drop: int
) -> None:
    assert_remaining_length_matches(body_with_comments("".join(fragments)), keep_every, drop)


def test_remaining_length_joins_words_across_a_removed_element() -> None:
    body = body_with_comments("<p>run<b>gone</b>on words</p>")
    measured = SubtreeText(body)
    paragraph, bold = body[0], body[0][0]
    remove_keeping_tail(bold)
    assert measured.remaining_length([paragraph], [bold]) == len("runon words")


def test_remaining_length_is_none_for_an_element_it_never_measured() -> None:
    body = body_with_comments("<p>words</p>")
    assert SubtreeText(body).remaining_length([body[0]], [etree.Element("b")]) is None


@given(st.text(alphabet=" \t\n\r\x0b\x1c\x85\u00a0\u2009\u200b\u3000ab\u00e9", max_size=12))
def test_squash_is_split_and_join(text: str) -> None:
    assert squash(text) == " ".join(text.split())


def test_subtree_text_answers_for_elements_outside_its_root() -> None:
    body = body_with_comments("<div><p>inside text</p></div><p>outside <a href='/x'>link</a></p>")
    inside, outside = body[0], body[1]
    measured = SubtreeText(inside)
    assert measured.length(inside) == len("inside text")
    assert measured.length(outside) == len("outside link")
    assert measured.link_length(outside) == len("link")


def test_subtree_text_leaves_out_the_roots_tail() -> None:
    body = body_with_comments("<p>own</p> tail words")
    assert SubtreeText(body[0]).length(body[0]) == len("own")


def test_subtree_text_stops_at_the_deadline() -> None:
    body = body_with_comments("<p>x</p>" * 3000)
    with pytest.raises(DeadlineExceeded):
        SubtreeText(body, deadline=time.monotonic() - 1)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ('<meta property="og:type" content="article">', True),
        ('<meta property="og:type" content="Article:News">', True),
        ('<meta property="og:type" content="product">', False),
        ("", False),
    ],
)
def test_declares_article(head: str, expected: bool) -> None:
    from gateway.extract.tree import declares_article, parse_html

    root = parse_html(f"<html><head>{head}</head><body></body></html>".encode(), "text/html")
    assert root is not None and declares_article(root) is expected


def test_link_length_counts_outermost_links() -> None:
    from lxml import etree

    from gateway.extract.tree import link_length

    root = etree.fromstring("<div>text <a href='/a'>one two</a> <a href='/b'>three</a></div>")
    assert link_length(root) == len("one two") + len("three")


MAIN_HEADING_CASES = [
    pytest.param("<h1>River floods lower town</h1>", "River floods | Gazette",
                 "River floods lower town", id="the-only-h1"),
    pytest.param('<h1 class="logo">Gazette</h1><h1>River floods lower town</h1>',
                 "Gazette", "River floods lower town", id="logo-class-skipped"),
    pytest.param('<h1><a href="/">Gazette</a></h1><h1>River floods</h1>', "Gazette",
                 "River floods", id="link-home-skipped"),
    pytest.param("<h1>Latest news</h1><h1>River floods lower town</h1>",
                 "River floods lower town - Gazette", "River floods lower town",
                 id="most-like-the-title"),
    pytest.param("<nav><h1>Menu</h1></nav><footer><h1>Contact</h1></footer>", "Page", None,
                 id="navigation-and-footer-skipped"),
    pytest.param("<h2>Related</h2><h2>River floods lower town</h2>", "River floods lower town",
                 "River floods lower town", id="h2-repeating-the-title"),
    pytest.param("<h2>Related</h2>", "River floods lower town", None, id="no-heading"),
    pytest.param(f"<h1>{'word ' * 100}</h1>", None, None, id="too-long-to-be-a-heading"),
]


@pytest.mark.parametrize(("body", "title", "expected"), MAIN_HEADING_CASES)
def test_main_heading(body: str, title: str | None, expected: str | None) -> None:
    root = etree.fromstring(f"<html><body>{body}</body></html>".encode(),
                            etree.HTMLParser(encoding="utf-8"))
    assert main_heading(root, title) == expected
