"""HTML fragments -> Markdown and plain text: one case per construct agents read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from gateway.extract.markdown import LinkResolver, Renderer, resolve_href


def render(fragment: str, *, markdown: bool = True) -> str:
    parser = etree.HTMLParser(encoding="utf-8")
    root = etree.fromstring(f"<html><body>{fragment}</body></html>".encode(), parser)
    return Renderer(markdown=markdown).render(root.find("body"))


MARKDOWN_CASES = [
    pytest.param("<h1>Top</h1><h3>Three <em>x</em></h3>", "# Top\n\n### Three *x*", id="headings"),
    pytest.param("<p>one</p>  <p>two\n  lines</p>", "one\n\ntwo lines", id="paragraphs"),
    pytest.param("<p>a<br>b<br> <br>\n<br>c<br></p>", "a\nb\n\nc", id="line-breaks"),
    pytest.param("<ul><li>a</li><li>b</li></ul>", "- a\n- b", id="list"),
    pytest.param("<ul><li>a<ul><li>a1</li><li>a2<ol><li>deep</li></ol></li></ul></li><li>b</li></ul>",
                 "- a\n  - a1\n  - a2\n    1. deep\n- b", id="nested-lists"),
    pytest.param('<ol start="3"><li>c</li><li>d</li></ol>', "3. c\n4. d", id="ordered-start"),
    pytest.param("<ol><li><p>para one</p><p>para two</p></li></ol>",
                 "1. para one\n   para two", id="item-with-paragraphs"),
    pytest.param("<ul><li></li><li>only</li></ul>", "- only", id="empty-item-skipped"),
    pytest.param('<p>see <a href="https://example.org/a">the docs</a>.</p>',
                 "see [the docs](https://example.org/a).", id="link"),
    pytest.param('<p><a href="/rel/path?q=1">relative</a></p>', "[relative](/rel/path?q=1)",
                 id="relative-link-kept-as-written"),
    pytest.param('<p><a href="javascript:alert(1)">click</a> me</p>', "click me",
                 id="javascript-link-dropped"),
    pytest.param('<p><a href=" JavaScript:void(0)">x</a></p>', "x", id="javascript-any-case"),
    pytest.param('<p><a href="#top">back</a></p>', "back", id="fragment-link-dropped"),
    pytest.param('<p><a href="data:text/html,hi">d</a></p>', "d", id="data-link-dropped"),
    pytest.param('<p><a href="/a (b)">x</a></p>', "[x](</a%20(b)>)", id="link-with-parens"),
    pytest.param('<p><a href="/x">[1]</a></p>', "[\\[1\\]](/x)", id="brackets-escaped"),
    pytest.param('<p><a href="/x"> spaced </a>out</p>', "[spaced](/x) out", id="link-spaces"),
    pytest.param('<p><a href="/x"></a>empty</p>', "empty", id="empty-link"),
    pytest.param("<pre><code class=\"language-python\">def f():\n    return 1\n</code></pre>",
                 "```python\ndef f():\n    return 1\n```", id="code-block-language"),
    pytest.param('<pre class="highlight-source-rust">fn main() {}</pre>',
                 "```rust\nfn main() {}\n```", id="code-block-highlight-class"),
    pytest.param('<div class="highlight highlight-source-python"><pre>x = 1</pre></div>',
                 "```python\nx = 1\n```", id="code-block-github"),
    pytest.param('<div class="highlight-console notranslate"><div class="highlight"><pre>'
                 "$ ls</pre></div></div>", "```console\n$ ls\n```", id="code-block-sphinx"),
    pytest.param('<div class="highlight-default"><div class="highlight"><pre>x</pre></div></div>',
                 "```\nx\n```", id="code-block-sphinx-default"),
    pytest.param('<pre class="sourceCode haskell"><code>main = pure ()</code></pre>',
                 "```haskell\nmain = pure ()\n```", id="code-block-pandoc"),
    pytest.param('<pre class="brush: js; gutter: false">f()</pre>', "```js\nf()\n```",
                 id="code-block-syntaxhighlighter"),
    pytest.param('<pre data-lang="Go">go f()</pre>', "```go\ngo f()\n```", id="code-block-data-lang"),
    pytest.param('<pre class="language-a`b">x</pre>', "```a\nx\n```",
                 id="code-block-language-stops-at-backtick"),
    pytest.param("<pre>x = `a`\n```\ny</pre>", "````\nx = `a`\n```\ny\n````",
                 id="code-block-longer-fence"),
    pytest.param("<pre>a<br>b</pre>", "```\na\nb\n```", id="code-block-br"),
    pytest.param("<pre><span>if</span> x &lt; 1:\n  <b>pass</b></pre>",
                 "```\nif x < 1:\n  pass\n```", id="code-block-markup-inside"),
    pytest.param("<p>run <code>ls -l</code> now</p>", "run `ls -l` now", id="inline-code"),
    pytest.param("<p><code>a`b</code></p>", "``a`b``", id="inline-code-backtick"),
    pytest.param("<p><em>it</em> and <strong>bold</strong> and <b><i>both</i></b></p>",
                 "*it* and **bold** and ***both***", id="emphasis"),
    pytest.param("<p>a<em> spaced </em>b</p>", "a *spaced* b", id="emphasis-spaces-outside"),
    pytest.param("<p><em> </em>x</p>", "x", id="empty-emphasis"),
    pytest.param("<blockquote><p>one</p><p>two</p></blockquote>", "> one\n>\n> two",
                 id="blockquote"),
    pytest.param(
        "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>x|y</td></tr></table>",
        "| a | b |\n|---|---|\n| 1 | x\\|y |",
        id="table",
    ),
    pytest.param(
        "<table><thead><tr><th>h1</th><th>h2</th><th>h3</th></tr></thead>"
        "<tbody><tr><td colspan=2>wide</td><td>z</td></tr><tr><td>short</td></tr></tbody></table>",
        "| h1 | h2 | h3 |\n|---|---|---|\n| wide |  | z |\n| short |  |  |",
        id="table-colspan-and-ragged-rows",
    ),
    pytest.param("<table><tr><td><p>layout cell</p></td></tr><tr><td>two</td></tr></table>",
                 "layout cell\n\ntwo", id="one-column-table-is-layout"),
    pytest.param(
        "<table><tr><td><table><tr><td>a</td><td>b</td></tr></table></td><td>side</td></tr></table>",
        "|  |  |\n|---|---|\n| a | b |\n\nside",
        id="nested-table-is-layout",
    ),
    pytest.param('<p>x <img src="a.png" alt="A red bicycle"> y</p>', "x ![A red bicycle](a.png) y",
                 id="image-with-alt-text"),
    pytest.param('<p><a href="/bikes"><img src="a.png" alt="A red bicycle"> All [bikes]</a></p>',
                 "[![A red bicycle](a.png) All \\[bikes\\]](/bikes)", id="image-in-link"),
    pytest.param('<p><img src="a.png" alt="A red bicycle" aria-hidden="true">'
                 '<img src="b.png" alt="A tree" role="presentation"><img src="c.png" alt=" ">'
                 '<img src="/pixel.gif" alt="Visitor counter" width="1">x</p>', "x",
                 id="decorative-images-left-out"),
    pytest.param('<p><img src="data:image/png;base64,AAAA" alt="A red bicycle">x</p>', "x",
                 id="image-without-address-left-out"),
    pytest.param('<p><img src="javascript:alert(1)" alt="A red bicycle"><img src="mailto:a@b.example"'
                 ' alt="A blue bicycle">x</p>', "x", id="image-addresses-only-web"),
    pytest.param('<p><img src="data:image/png;base64,AAAA" data-src="/a.png" alt="A red bicycle">'
                 '</p>', "![A red bicycle](/a.png)", id="lazy-image-address"),
    pytest.param('<p><img srcset="/a-1x.png 1x, /a-2x.png 2x" alt="A red bicycle"></p>',
                 "![A red bicycle](/a-1x.png)", id="image-srcset"),
    pytest.param('<div><img src="a.png" alt="Red bicycle"><img src="a-zoom.png" alt="Red bicycle">'
                 "</div>", "![Red bicycle](a.png)", id="same-picture-again-once"),
    pytest.param('<div><a href="/p/1"><img src="a.png" alt="Red city bicycle hover image">'
                 "<span>Red city bicycle</span> <b>$299</b></a></div>",
                 "[Red city bicycle **$299**](/p/1)", id="image-its-card-names-left-out"),
    pytest.param('<div><a href="/p/1"><img src="a.png" alt="Red city bicycle photo"></a> '
                 '<a href="/p/1">Red city bicycle</a></div>', "[Red city bicycle](/p/1)",
                 id="image-named-beside-its-link-left-out"),
    pytest.param('<ul><li><img src="a.png" alt="Big Agnes sleeping bag 0"></li><li><img src="b.png" '
                 'alt="Big Agnes sleeping bag hood detail"></li></ul>',
                 "- ![Big Agnes sleeping bag 0](a.png)", id="views-of-one-thing-once"),
    pytest.param('<p><img src="l.png" alt="An image of the Cotman logo."> x</p>', "x",
                 id="logo-left-out"),
    pytest.param('<h2><img src="i.png" alt="A star icon shining"> Top picks</h2>', "## Top picks",
                 id="no-images-in-headings"),
    pytest.param('<figure><img src="a.png" alt="A red bicycle"><figcaption>My <b>first</b> bike'
                 "</figcaption></figure>", "![A red bicycle](a.png)\n\n*My first bike*",
                 id="figure-caption-italic"),
    pytest.param('<p>x<img src="a.png" alt="photo-2019-01.jpg">y</p>', "xy",
                 id="image-file-name-alt-dropped"),
    pytest.param('<p>x<img src="a.png">y</p>', "xy", id="image-without-alt"),
    pytest.param("<p>a</p><hr><p>b</p>", "a\n\n---\n\nb", id="rule"),
    pytest.param("<div><span>inline <div>block inside span</div> after</span></div>",
                 "inline\n\nblock inside span\n\nafter", id="block-inside-inline"),
    pytest.param('<a href="/card"><div><h3>Card</h3><p>teaser</p></div></a>',
                 "### Card\n\nteaser", id="link-wrapping-blocks"),
    pytest.param("<p>a&nbsp;b &amp; c &lt;d&gt; &#x41; &bogus; &#99999999;</p>",
                 "a b & c <d> A &bogus; \ufffd", id="entities"),
    pytest.param("<script>alert(1)</script><style>p{}</style><p>kept</p>", "kept",
                 id="script-style-skipped"),
    pytest.param("<dl><dt>term</dt><dd>meaning</dd></dl>", "term\n: meaning", id="definitions"),
    pytest.param("<dl><dt>a</dt><dt>b</dt><dd>one</dd><dd><p>two</p><p>more</p></dd>"
                 "<div><dt>c</dt><dd>three</dd></div></dl>",
                 "a\nb\n: one\n: two\n  more\n\nc\n: three", id="definitions-grouped"),
    pytest.param(
        "<table><tfoot><tr><td>f</td><td>g</td></tr></tfoot><thead><tr><th colspan=2>Q1</th>"
        "</tr><tr><th>Jan</th><th>Feb</th></tr></thead><tbody><tr><td rowspan=2>1</td><td>2</td>"
        "</tr><tr><td>3</td></tr></tbody></table>",
        "| Q1 Jan | Q1 Feb |\n|---|---|\n| 1 | 2 |\n|  | 3 |\n| f | g |",
        id="table-header-rows-rowspan-foot-last",
    ),
    pytest.param("<p><span><b><i>deep</i></b> inline</span> <span><em><span><div>blk</div>"
                 "</span></em></span></p>", "***deep*** inline\n\nblk", id="block-deep-in-inline"),
    pytest.param("<p><a href='/x'><img alt='A red bicycle'><i>bike</i></a> <b><br></b>y</p>",
                 "[*bike*](/x)\ny", id="inline-with-inline-children-only"),
    pytest.param("<p>a\tb\u00a0\u00a0c\u2028d\u2029e\u200bf  g\r\nh\x0ci\x0bj</p>",
                 "a b c d e f g h i j", id="whitespace-squashed"),
    pytest.param("<p>a\u2003b\u3000c\x1cd</p>", "a b c d", id="other-unicode-spaces"),
    pytest.param("<p><b>a</b>\n   <i>b</i>\t<b>c</b><i>d</i></p>", "**a** *b* **c***d*",
                 id="whitespace-only-tails"),
    pytest.param("<p>x\u00ad<b>\u200e y</b></p>", "x\u00ad**\u200e y**",
                 id="non-printable-but-not-space"),
]


@pytest.mark.parametrize(("fragment", "expected"), MARKDOWN_CASES)
def test_markdown(fragment: str, expected: str) -> None:
    assert render(fragment) == expected


TEXT_CASES = [
    pytest.param("<h2>Head</h2><p>a <em>b</em> <a href='/x'>c</a> <code>d</code></p>",
                 "Head\n\na b c d", id="no-markup"),
    pytest.param("<ul><li>a<ul><li>b</li></ul></li></ul>", "- a\n  - b", id="lists-keep-bullets"),
    pytest.param("<pre class='language-js'>let x = 1;</pre>", "let x = 1;", id="code-unfenced"),
    pytest.param("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td></td></tr></table>",
                 "a | b\nc", id="table-cells"),
    pytest.param("<blockquote>q</blockquote>", "q", id="blockquote-unmarked"),
    pytest.param('<p>x <img src="a.png" alt="A red bicycle"> y</p>', "x y", id="images-left-out"),
    pytest.param("<dl><dt>term</dt><dd>meaning</dd></dl>", "term\n  meaning", id="definitions"),
    pytest.param("<figure><figcaption>My <b>first</b> bike</figcaption></figure>", "My first bike",
                 id="caption-unmarked"),
]


@pytest.mark.parametrize(("fragment", "expected"), TEXT_CASES)
def test_plain_text(fragment: str, expected: str) -> None:
    assert render(fragment, markdown=False) == expected


def test_headings_are_collected() -> None:
    parser = etree.HTMLParser(encoding="utf-8")
    root = etree.fromstring(b"<h1>A <em>b</em></h1><p>x</p><h4>C</h4><h2> </h2>", parser)
    renderer = Renderer(markdown=True)
    renderer.render(root)
    assert renderer.headings == [(1, "A b"), (4, "C")]


def test_deep_nesting_renders_flat() -> None:
    depth = 250  # libxml2 keeps up to 255 levels; the renderer flattens past its own cap
    text = render("<div>" * depth + "<p>deep <b>words</b></p>" + "</div>" * depth)
    assert text == "deep words"


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("/docs/a b", "[x](https://site.example/docs/a%20b)"),
        ("../up", "[x](https://site.example/up)"),
        ("//cdn.example/f", "[x](https://cdn.example/f)"),
        ("mailto:a@site.example", "[x](mailto:a@site.example)"),
        ("javascript:alert(1)", "x"),
        ("java\tscript:alert(1)", "x"),
        (" JavaScript:alert(1)", "x"),
        ("data:text/html,<b>x</b>", "x"),
        ("vbscript:x", "x"),
        ("#top", "x"),
        ("http://[::1", "x"),  # not a URL: the text stays, the link goes
    ],
)
def test_links_are_resolved_against_the_page(href: str, expected: str) -> None:
    parser = etree.HTMLParser(encoding="utf-8")
    root = etree.fromstring(b"<html><body><p><a>x</a></p></body></html>", parser)
    root.find(".//a").set("href", href)
    renderer = Renderer(markdown=True, base_url="https://site.example/docs/page")
    assert renderer.render(root.find("body")) == expected


# --- LinkResolver: its shortcut for plain root-relative links must resolve as urljoin does --

_HREF_PARTS = ["a", "b9", "/", "//", ".", "..", "?", "#", ";", "=", "&", "%2e", "\u00e9", " ",
               "\t", "\\", ":", "@", "[", "]", "~", "\x01", "\u00a0", "/./", "/../", "x.y"]


@settings(max_examples=2000, deadline=None)
@given(
    st.lists(st.sampled_from(_HREF_PARTS), max_size=8).map(lambda parts: "/" + "".join(parts)),
    st.sampled_from([
        "https://site.example/docs/page?q=1#top",
        "http://user@site.example:8080/",
        "https://site.example",
        "ftp://files.example/dir/",
        "relative/base",
    ]),
)
def test_link_resolver_resolves_as_resolve_href(href: str, base_url: str) -> None:
    resolver = LinkResolver(base_url)
    assert resolver(href) == resolve_href(href, base_url)
    assert resolver(href) == resolve_href(href, base_url)  # a second time, from its memory


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("/2026/1/2", "https://site.example/2026/1/2"),
        ("/a/?x=1#f", "https://site.example/a/?x=1#f"),
        ("/a//b", "https://site.example/a//b"),  # left to urljoin, not the shortcut
        ("/a/../b", "https://site.example/b"),
        ("/a?", "https://site.example/a"),
        (None, None),
    ],
)
def test_link_resolver_cases(href: str | None, expected: str | None) -> None:
    assert LinkResolver("https://site.example/docs/page")(href) == expected
