"""Main-content selection: the article survives, the furniture around and inside it does not."""

from __future__ import annotations

import pytest

from gateway.extract import extract

ARTICLE_PARAGRAPHS = [
    "The river rose three metres overnight, flooding the lower town, and the council opened "
    "two shelters in the school and the church hall before dawn.",
    "Residents said the warning came late, although the forecast had predicted heavy rain for "
    "days, and several families lost cars, furniture and documents.",
    "Engineers will inspect the old stone bridge on Monday, the mayor said, adding that the "
    "road to the valley stays closed until they declare it safe.",
    "Volunteers handed out blankets, hot soup and dry clothes, while the fire brigade pumped "
    "water from cellars along the high street late into the evening.",
]
ARTICLE = "".join(f"<p>{text}</p>" for text in ARTICLE_PARAGRAPHS)

NAV = '<nav><ul><li><a href="/">Home</a></li><li><a href="/news">News desk today</a></li></ul></nav>'
HEADER = '<header class="site-header"><div class="logo">Valley Gazette masthead</div></header>'
FOOTER = "<footer><p>Copyright Valley Gazette, all rights reserved, 1999 to 2026.</p></footer>"
ASIDE = "<aside><h3>Most read</h3><p>Something else happened somewhere else entirely today.</p></aside>"
COOKIES = (
    '<div class="cookie-banner"><p>We use cookies to improve your experience, accept them '
    "or manage your settings.</p></div>"
)
SHARE = '<div class="share-buttons"><a href="https://x.example/share">Share on X</a> Email</div>'
COMMENTS = (
    '<section id="comments"><h2>Comments</h2><div class="comment"><p>First! This is a long '
    "reader comment that goes on and on about the river, the council, and the weather, and "
    "so on, and so forth, with many commas, to look like content.</p></div></section>"
)
RELATED = (
    '<ul class="links"><li><a href="/a">Storm hits coast</a></li><li><a href="/b">Dam '
    'repairs begin</a></li><li><a href="/c">Weather warning issued</a></li></ul>'
)
FORM = '<form action="/subscribe"><input name="email"><button>Sign up</button></form>'


def page(body: str, title: str = "River floods lower town") -> bytes:
    return (
        f"<!doctype html><html><head><title>{title} | Valley Gazette</title>"
        f'<meta name="description" content="A flood report."></head><body>{body}</body></html>'
    ).encode()


def text_of(body: str) -> str:
    return extract(page(body), "text/html", "text").text


def assert_article(text: str) -> None:
    for paragraph in ARTICLE_PARAGRAPHS:
        assert paragraph in text


DROPPED_CASES = [
    pytest.param(NAV, "Home", id="nav"),
    pytest.param(HEADER, "masthead", id="header"),
    pytest.param(FOOTER, "Copyright", id="footer"),
    pytest.param(ASIDE, "Most read", id="aside"),
    pytest.param(COOKIES, "cookies", id="cookie-banner"),
    pytest.param(SHARE, "Share on X", id="share-widget"),
    pytest.param(COMMENTS, "First!", id="comment-section"),
    pytest.param(FORM, "Sign up", id="form-controls"),
    pytest.param('<div role="navigation"><p>Jump to section list here</p></div>', "Jump",
                 id="role-navigation"),
    pytest.param('<div style="display: none"><p>Hidden teaser text for crawlers.</p></div>',
                 "Hidden teaser", id="display-none"),
    pytest.param("<div hidden><p>Hidden by attribute, never shown to readers.</p></div>",
                 "Hidden by attribute", id="hidden-attribute"),
    pytest.param("<script>var secret = 'script text';</script>", "script text", id="script"),
    pytest.param("<style>.a{content:'style text'}</style>", "style text", id="style"),
    pytest.param('<iframe src="/ad">frame text</iframe>', "frame text", id="iframe"),
    # a doomed element goes whole, whatever is inside it: a wordy widget keeps no ancestor
    pytest.param('<div class="sidebar"><div class="share-panel"><p>Sidebar essay '
                 + "words " * 120 + "</p></div></div>", "Sidebar essay",
                 id="wordy-widget-inside-sidebar"),
    pytest.param('<div hidden><div class="comments"><p>Hidden thread text</p></div>'
                 '<div class="byline">Hidden byline</div></div>', "Hidden",
                 id="furniture-inside-hidden"),
]


@pytest.mark.parametrize(("furniture", "marker"), DROPPED_CASES)
def test_furniture_around_the_article_is_dropped(furniture: str, marker: str) -> None:
    text = text_of(f"{furniture}<article>{furniture}{ARTICLE}{furniture}</article>{furniture}")
    assert_article(text)
    assert marker not in text


def test_related_links_inside_the_article_are_dropped() -> None:
    text = text_of(f"<article>{ARTICLE}{RELATED}</article>")
    assert_article(text)
    assert "Storm hits coast" not in text


def test_article_preferred_over_a_busier_sidebar() -> None:
    sidebar = '<div class="sidebar">' + "".join(
        f'<p><a href="/s{i}">Sidebar story number {i} with a long linked headline</a></p>'
        for i in range(30)
    ) + "</div>"
    text = text_of(f"{sidebar}<div class='main-column'><article>{ARTICLE}</article></div>")
    assert_article(text)
    assert "Sidebar story" not in text


def test_content_without_semantic_tags_is_found_by_scoring() -> None:
    menu = '<div id="top">' + " | ".join(f'<a href="/{i}">Section {i}</a>' for i in range(20))
    menu += "</div>"
    blurb = '<div class="promo-box"><p>Subscribe for just one euro a month.</p></div>'
    text = text_of(f"{menu}<div><div class='x1'>{ARTICLE}</div>{blurb}</div>")
    assert_article(text)
    assert "Section 3" not in text


def test_page_wrapped_in_a_form_keeps_its_article() -> None:
    # ASP.NET sites wrap the whole page in one <form>: dropping forms would drop the article
    text = text_of(f'<form id="aspnetForm" action="/x">{NAV}<div class="story">{ARTICLE}'
                   f"</div></form>")
    assert_article(text)


def test_article_split_into_cards_is_kept_whole() -> None:
    cards = "".join(
        f'<div class="card"><div class="card-content"><p>{text}</p></div></div>'
        for text in ARTICLE_PARAGRAPHS
    )
    text = text_of(f"{NAV}<div id='article-body'>{cards}</div>{FOOTER}")
    assert_article(text)


def test_text_directly_in_a_div_counts() -> None:
    body = "<div class='col'><p class='title'>Headline</p><img src='a.jpg'>" + " ".join(
        ARTICLE_PARAGRAPHS
    ) + "<br><br></div>"
    text = text_of(f"<div class='menu'>{NAV}</div>{body}")
    assert ARTICLE_PARAGRAPHS[0] in text


def test_title_repeated_as_heading_is_not_repeated_in_the_text() -> None:
    document = extract(page(f"<article><h1>River floods lower town</h1><h2>Shelters open</h2>"
                            f"{ARTICLE}</article>"), "text/html")
    assert document.title == "River floods lower town | Valley Gazette"
    assert "# River floods" not in document.text
    assert document.headings == ((2, "Shelters open"),)


def test_short_article_is_not_padded_with_comments() -> None:
    short = "<p>The open thread is here: ask us anything about the programme this quarter.</p>"
    text = text_of(f"<article><div class='entry-content'>{short}</div>{COMMENTS}</article>")
    assert "open thread" in text
    assert "First!" not in text


def test_page_without_paragraphs_falls_back_to_the_body() -> None:
    text = text_of("<div>just a line of text</div><div>and another one</div>")
    assert "just a line of text" in text and "and another one" in text
