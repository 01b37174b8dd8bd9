"""Render an HTML subtree as Markdown, or as plain text with paragraph breaks.

Markdown keeps headings, lists (nested), links (`javascript:`, fragment-only and data links
become their text), fenced code with its language, inline code, emphasis, blockquotes,
tables (header rows, `colspan`, `rowspan`), definition lists (`term`, then `: definition`),
images that have alt text (`![alt](url)`; decorative ones are left out) and figure captions
(an italic line). Plain text keeps the same blocks without markup, and no images.
One Renderer per call: it holds the output being built.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Iterator
from urllib.parse import urljoin, urlsplit

from lxml import etree

from gateway.extract.content import DeadlineExceeded
from gateway.extract.tree import squash

_WHITESPACE = re.compile(r"[ \t\n\r\f\v\u00a0\u2028\u2029\u200b]+")
_ASCII_WHITESPACE = " \t\n\r\f\v"  # all in _WHITESPACE
_BACKTICKS = re.compile(r"`+")
_LANGUAGE = re.compile(
    r"(?:^|\s)(?:(?:language|lang|highlight-source|highlight)-|brush:\s*|sourcecode\s+)"
    r"([a-z0-9_+#.-]{1,30})"
)
_NO_LANGUAGE = frozenset(
    {"default", "none", "text", "plain", "plaintext", "nohighlight", "notranslate"}
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = frozenset(
    {"address", "article", "aside", "blockquote", "body", "center", "dd", "details", "dialog",
     "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1",
     "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "html", "li", "main", "menu",
     "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th",
     "thead", "tr", "ul", "caption", "legend", "noscript", "output"}
)
_CODE_INLINE = frozenset({"code", "kbd", "samp", "tt", "var"})
_EMPHASIS = {"em": "*", "i": "*", "cite": "*", "dfn": "*", "strong": "**", "b": "**"}
_SKIPPED = frozenset({"script", "style", "template", "head", "title", "noscript"})

MAX_DEPTH = 120  # beyond this, a subtree becomes flat text (libxml2 itself stops at 255)
MAX_HREF_CHARS = 2048
MAX_TABLE_COLUMNS = 64
MAX_COLSPAN = 16
MAX_ROWSPAN = 64
MAX_ALT_CHARS = 300
# an alt text that is only a file name or a placeholder says nothing about the picture
_NAME_ONLY_ALT = re.compile(
    r"[\w.-]+\.(?:jpe?g|png|gif|webp|svg|avif|bmp|ico|tiff?)|image|img|photo|picture|icon|logo"
    r"|spacer|placeholder|blank|pixel|thumbnail|null|undefined|-|_|\*",
    re.I,
)
# where lazy-loading scripts keep an image's real address
_IMAGE_SOURCES = ("src", "data-src", "data-lazy-src", "data-original", "data-srcset", "srcset")
_IMAGE_IN_LINK = re.compile(r"(!\[(?:\\.|[^\]\\])*\]\((?:<[^>\n]*>|[^)\n]*)\))")


def _squash_inline(text: str) -> str:
    # most text has nothing to squash: no printable character is whitespace but U+0020
    if text.isprintable() and "  " not in text:
        return text
    if not text.strip(_ASCII_WHITESPACE):  # the line breaks and indents between tags
        return " "
    return _WHITESPACE.sub(" ", text)


class Renderer:
    """Builds the text of one subtree; `headings` collects (level, text) on the way."""

    def __init__(
        self,
        *,
        markdown: bool,
        deadline: float | None = None,
        base_url: str | None = None,
        main_heading: str | None = None,
    ) -> None:
        self.markdown = markdown
        # the page's main heading, which its caller puts first: not repeated where it stands
        self._main_heading = squash(main_heading).lower() if main_heading else None
        self.deadline = deadline
        self.base_url = base_url
        # pages link to the same places again and again: each href is resolved once
        self._target = LinkResolver(base_url)
        self.headings: list[tuple[int, str]] = []
        self._seen = 0
        # the elements that hold a block element somewhere below them, found on first need
        self._block_holders: set[etree._Element] | None = None
        self._root: etree._Element | None = None
        self._in_heading = False
        self._alts_shown: set[str] = set()
        self._last_series: str | None = None

    def render(self, root: etree._Element) -> str:
        blocks: list[str] = []
        self._root = root
        self._block_holders = None
        self._blocks(root, blocks, 0)
        return "\n\n".join(blocks)

    # --- blocks -------------------------------------------------------------------------

    def _blocks(self, el: etree._Element, out: list[str], depth: int) -> None:
        """Render the children of a block container into `out`."""
        self._tick()
        inline: list[str] = []
        text = el.text
        if text:
            inline.append(_squash_inline(text))
        for child in el:
            tag = child.tag
            if not isinstance(tag, str) or tag in _SKIPPED:
                pass
            elif tag in _BLOCKS or self._is_block(child, tag):
                self._flush(inline, out)
                self._block(child, out, depth + 1)
            else:
                inline.append(self._inline(child, depth + 1))
            tail = child.tail
            if tail:
                inline.append(_squash_inline(tail))
        self._flush(inline, out)

    def _tick(self) -> None:
        """Count an element rendered; every 512, check the deadline."""
        self._seen += 1
        if (
            self.deadline is not None
            and self._seen % 512 == 0
            and time.monotonic() > self.deadline
        ):
            raise DeadlineExceeded

    def _is_block(self, el: etree._Element, tag: str) -> bool:
        if tag in _BLOCKS:
            return True
        if tag == "br" or tag == "img" or not len(el):
            return False
        # an inline element wrapping blocks (a card link, a span around paragraphs)
        holders = self._block_holders
        if holders is None:
            holders = self._block_holders = _block_holders(self._root)
        return el in holders

    @staticmethod
    def _flush(inline: list[str], out: list[str]) -> None:
        if not inline:
            return
        text = "".join(inline)
        inline.clear()
        if "\n" not in text:  # the common case: one line
            line = squash(text)
            if line:
                out.append(line)
            return
        # pieces were squashed one by one; where they meet, spaces can still double up.
        # A blank line (<br><br>) separates paragraphs, as sites without <p> use it.
        lines: list[str] = []
        for raw in text.split("\n"):
            line = squash(raw)
            if line:
                lines.append(line)
            elif lines:
                out.append("\n".join(lines))
                lines.clear()
        if lines:
            out.append("\n".join(lines))

    def _block(self, el: etree._Element, out: list[str], depth: int) -> None:
        if depth > MAX_DEPTH:
            flat = _squash_inline("".join(el.itertext())).strip()
            if flat:
                out.append(flat)
            return
        tag = el.tag
        if tag == "p" or tag == "div":  # the most common blocks, asked nothing else
            self._blocks(el, out, depth)
            return
        level = _HEADINGS.get(tag)
        if level is not None:
            self._in_heading = True
            try:
                text = _squash_inline(self._inline_children(el, depth)).strip()
            finally:
                self._in_heading = False
            if text:
                plain = _squash_inline("".join(el.itertext())).strip()
                if self._main_heading is not None and level <= 2 and (
                    squash(plain).lower() == self._main_heading
                ):
                    return
                self.headings.append((level, plain))
                out.append(("#" * level + " " + text) if self.markdown else text)
            return
        if tag == "pre":
            self._code_block(el, out)
        elif tag in ("ul", "ol", "menu", "dir"):
            self._list(el, out, depth)
        elif tag == "li":
            self._list_item("- ", el, out, depth)
        elif tag == "blockquote":
            inner: list[str] = []
            self._blocks(el, inner, depth)
            if inner:
                text = "\n\n".join(inner)
                if self.markdown:
                    text = "\n".join("> " + line if line else ">" for line in text.split("\n"))
                out.append(text)
        elif tag == "table":
            self._table(el, out, depth)
        elif tag == "dl":
            self._definitions(el, out, depth)
        elif tag == "figcaption":
            self._caption(el, out, depth)
        elif tag == "hr":
            if self.markdown:
                out.append("---")
        else:
            self._blocks(el, out, depth)

    def _code_block(self, el: etree._Element, out: list[str]) -> None:
        code = _preformatted_text(el).strip("\n").rstrip()
        if not code.strip():
            return
        if not self.markdown:
            out.append(code)
            return
        language = _code_language(el)
        longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
        fence = "`" * max(3, longest + 1)
        out.append(f"{fence}{language}\n{code}\n{fence}")

    def _list(self, el: etree._Element, out: list[str], depth: int) -> None:
        ordered = el.tag == "ol"
        number = 1
        if ordered:
            start = (el.get("start") or "").strip()
            if start.isdigit() and len(start) < 10:
                number = int(start)
        items: list[str] = []
        loose: list[etree._Element] = []
        for child in el:
            if not isinstance(child.tag, str) or child.tag in _SKIPPED:
                continue
            if child.tag == "li":
                marker = f"{number}. " if ordered else "- "
                before = len(items)
                self._list_item(marker, child, items, depth + 1)
                if len(items) > before:
                    number += 1
            else:
                loose.append(child)
        for child in loose:  # stray content directly in a list: keep it, as blocks
            self._block(child, items, depth + 1)
        if items:
            out.append("\n".join(items))

    def _list_item(self, marker: str, el: etree._Element, out: list[str], depth: int) -> None:
        inner: list[str] = []
        self._blocks(el, inner, depth)
        text = "\n".join(inner).strip("\n")
        if not text:
            return
        pad = " " * len(marker)
        first, *rest = text.split("\n")
        out.append("\n".join([marker + first] + [pad + line if line else "" for line in rest]))

    def _definitions(self, el: etree._Element, out: list[str], depth: int) -> None:
        """A `<dl>`: each term on its line, each of its definitions under it as `: text`
        (Markdown's definition lists, as Pandoc and PHP Markdown Extra read them; plain text
        indents them instead); a blank line before each new group of terms."""
        groups: list[list[str]] = []
        lines: list[str] = []
        last = ""
        for child in _definition_items(el):
            inner: list[str] = []
            if child.tag == "dt":
                text = _squash_inline(self._inline_children(child, depth + 1)).strip()
                if not text:
                    continue
                if last == "dd" and lines:
                    groups.append(lines)
                    lines = []
                lines.append(text.replace("\n", " "))
                last = "dt"
                continue
            if child.tag == "dd":
                self._blocks(child, inner, depth + 1)
                text = "\n".join(inner).strip("\n")
                if not text:
                    continue
                marker = ": " if self.markdown else "  "
                first, *rest = text.split("\n")
                lines.append("\n".join(
                    [marker + first] + ["  " + line if line else "" for line in rest]
                ))
                last = "dd"
                continue
            self._block(child, inner, depth + 1)  # stray content: kept, as blocks
            if inner:
                if lines:
                    groups.append(lines)
                    lines = []
                groups.append(inner)
                last = ""
        if lines:
            groups.append(lines)
        out.extend("\n".join(group) for group in groups)

    def _caption(self, el: etree._Element, out: list[str], depth: int) -> None:
        """A figure's caption: its text as one line, in italics in Markdown (its own markup
        left out: emphasis cannot nest in emphasis)."""
        text = _squash_inline("".join(el.itertext())).strip()
        if not text:
            return
        if self.markdown:
            text = _wrap(text.replace("*", "\\*"), "*")
        out.append(text)

    def _image(self, el: etree._Element) -> str:
        """`![alt](url)` for a picture its page describes; "" for a decorative one (no alt
        text, or one that only names a file), one hidden from assistive technology, a
        tracking pixel, or one with no address to show."""
        alt = el.get("alt")
        if not alt or self._in_heading:
            return ""
        alt = _squash_inline(alt[:MAX_ALT_CHARS]).strip()
        if not alt or _NAME_ONLY_ALT.fullmatch(alt):
            return ""
        if el.get("aria-hidden") == "true" or (el.get("role") or "").lower() in (
            "presentation", "none"
        ):
            return ""
        for size in (el.get("width"), el.get("height")):
            if size is not None and size.strip() in ("0", "1", "2"):
                return ""
        target = None
        for name in _IMAGE_SOURCES:
            value = (el.get(name) or "").strip()
            if name.endswith("srcset"):
                value = value.split(",", 1)[0].strip().split(" ", 1)[0]
            if value and not value.lower().startswith("data:"):
                target = self._target(value)
                # a picture is fetched over the web: not a mail or ftp address
                if target is not None and not target[:7].lower().startswith(("mailto:", "ftp:")):
                    break
                target = None
        if target is None:
            return ""
        key = alt.lower()
        # the same picture again (a hover or zoom copy), another view of the thing the last
        # picture showed (a product's carousel), a brand's logo, or one its card names
        series = " ".join(key.split()[:SERIES_WORDS]) if key.count(" ") >= SERIES_WORDS else None
        if (
            key in self._alts_shown
            or (series is not None and series == self._last_series)
            or _LOGO_ALT.search(key)
            or _said_beside(el, key)
        ):
            return ""
        self._alts_shown.add(key)
        self._last_series = series
        alt = alt.replace("[", "\\[").replace("]", "\\]")
        return f"![{alt}]({_destination(target)})"

    def _table(self, el: etree._Element, out: list[str], depth: int) -> None:
        rows = _table_rows(el)
        nested = next(el.iterdescendants("table", "pre", "ul", "ol", "h1", "h2", "h3"), None)
        width = max((sum(_colspan(c) for c in row) for row in rows), default=0)
        if nested is not None or width < 2 or width > MAX_TABLE_COLUMNS:
            # a layout table: its cells are ordinary blocks
            for row in rows:
                for cell in row:
                    self._blocks(cell, out, depth + 1)
            caption = el.find("caption")
            if caption is not None:
                self._blocks(caption, out, depth + 1)
            return
        header_rows = _header_row_count(el, rows)
        lines: list[list[str]] = []
        # columns taken by a cell of an earlier row (rowspan): column -> rows still taken
        spanned: dict[int, int] = {}
        for number, row in enumerate(rows):
            header = number < header_rows
            cells: list[str] = []
            started: dict[int, int] = {}
            for cell in row:
                while len(cells) in spanned:
                    cells.append("")
                text = _squash_inline(
                    self._inline_children(cell, depth + 1).replace("\n", " ")
                ).strip()
                if self.markdown:
                    text = text.replace("|", "\\|")
                rowspan = _rowspan(cell)
                for offset in range(_colspan(cell)):
                    if rowspan > 1:
                        started[len(cells)] = rowspan - 1
                    # a header cell spanning columns names each of them
                    cells.append(text if offset == 0 or header else "")
            if spanned:
                cells.extend("" for _ in range(max(spanned) + 1 - len(cells)))
            spanned = {column: left - 1 for column, left in spanned.items() if left > 1}
            spanned.update(started)
            if any(cells):
                lines.append(cells)
            elif header:
                header_rows -= 1
        if not lines:
            return
        caption = el.find("caption")
        if caption is not None:
            text = _squash_inline("".join(caption.itertext())).strip()
            if text:
                out.append(text)
        header_rows = max(0, min(header_rows, len(lines)))
        width = max(map(len, lines))
        for cells in lines:
            cells.extend("" for _ in range(width - len(cells)))
        if self.markdown:
            if header_rows:
                # Markdown has one header row: several are read together, column by column
                head = [
                    " ".join(_unique(line[column] for line in lines[:header_rows]))
                    for column in range(width)
                ]
            else:
                head = [""] * width
            rendered = ["| " + " | ".join(head) + " |", "|" + "---|" * width]
            rendered.extend("| " + " | ".join(cells) + " |" for cells in lines[header_rows:])
        else:
            rendered = [
                " | ".join(_unique(cells) if number < header_rows else filter(None, cells))
                for number, cells in enumerate(lines)
            ]
        out.append("\n".join(rendered))

    # --- inline -------------------------------------------------------------------------

    def _inline_children(self, el: etree._Element, depth: int) -> str:
        parts: list[str] = []
        text = el.text
        if text:
            parts.append(_squash_inline(text))
        for child in el:
            tag = child.tag
            if isinstance(tag, str) and tag not in _SKIPPED:
                parts.append(self._inline(child, depth + 1))
            tail = child.tail
            if tail:
                parts.append(_squash_inline(tail))
        return "".join(parts)

    def _inline(self, el: etree._Element, depth: int) -> str:
        self._seen += 1
        if self._seen & 511 == 0:  # _tick without the call: this runs for most elements
            self._seen -= 1
            self._tick()
        tag = el.tag
        if depth > MAX_DEPTH:
            return _squash_inline("".join(el.itertext()))
        if tag == "br":
            return "\n"
        if tag == "img":
            # plain text is the page's text: an image's alt text describes a picture
            return self._image(el) if self.markdown else ""
        if tag in _BLOCKS:  # a block inside inline content: a line of its own
            return "\n" + _squash_inline(self._inline_children(el, depth)).strip() + "\n"
        if tag in _CODE_INLINE:
            code = _squash_inline("".join(el.itertext()))
            if not code.strip():
                return code
            if not self.markdown:
                return code
            return _code_span(code)
        if len(el):
            inner = self._inline_children(el, depth)
        else:  # most inline elements (links, emphasis) hold only their text
            text = el.text
            inner = _squash_inline(text) if text else ""
        if not self.markdown:
            return inner
        if tag == "a":
            return _link(inner, self._target(el.get("href")))
        mark = _EMPHASIS.get(tag)
        if mark is not None:
            return _wrap(inner, mark)
        return inner


# words an alt text uses about the picture itself, not about what it shows
_PICTURE_WORDS = frozenset(
    {"image", "images", "photo", "photos", "picture", "hover", "thumbnail", "thumb", "icon",
     "logo", "of", "the", "a", "an", "for", "and", "main", "product", "featured", "alt"}
)
_ALT_WORD = re.compile(r"\w+")
MAX_CARD_CHARS = 600
SERIES_WORDS = 4
_LOGO_ALT = re.compile(r"\blogo\W*$")
MAX_CARD_BLOCK_CHARS = 150
REDUNDANT_ALT_SHARE = 0.8


def _said_beside(img: etree._Element, alt: str) -> bool:
    """Whether the text beside an image already says what its alt text does: the text of
    the link it is in, or of the small block that holds it (a card's name and price, never
    a paragraph's worth; never a figure's caption: the figure is there to show it). It is then
    decorative for a reader (WAI's images tutorial: adjacent text makes alt text redundant)."""
    words = [word for word in _ALT_WORD.findall(alt) if word not in _PICTURE_WORDS]
    if not words:
        return False
    # the card: the nearest link or block around the image with text of its own (a link
    # holding only the picture sits in a card whose name is beside it)
    text = ""
    for level, ancestor in enumerate(img.iterancestors()):
        if level >= 4:
            return False
        tag = ancestor.tag
        if tag == "figure":
            return False  # the picture is what the figure shows; its caption goes with it
        if tag != "a" and tag not in _BLOCKS:
            continue
        text = "".join(ancestor.itertext())
        if len(text) > 4 * MAX_CARD_CHARS:
            return False
        text = squash(text)
        if text:
            if len(text) > (MAX_CARD_CHARS if tag == "a" else MAX_CARD_BLOCK_CHARS):
                return False
            break
    if not text:
        return False
    around = set(_ALT_WORD.findall(text.lower()))
    return sum(word in around for word in words) >= REDUNDANT_ALT_SHARE * len(words)


def _wrap(inner: str, mark: str) -> str:
    core = inner.strip()
    if not core or "\n" in core:
        return inner
    lead = " " if inner[:1].isspace() else ""
    trail = " " if inner[-1:].isspace() else ""
    return f"{lead}{mark}{core}{mark}{trail}"


_LINK_SCHEMES = frozenset({"http", "https", "mailto", "ftp"})


# A root-relative target whose resolution is only the page's origin before it: its path has
# no empty, "." or ".." segments and no ";" (what `urljoin` would rewrite), its query and
# fragment, when present, are not empty (`urljoin` drops an empty one), no whitespace,
# backslash or control character anywhere.
_PLAIN_ROOT_RELATIVE = re.compile(
    r"/(?![/?#])(?:(?!\.\.?(?:[/?#]|$))[^/?#;\s\\\x00-\x1f\x7f]+(?:/(?!/)|(?=[?#])|$))*"
    r"(?:\?[^#\s\x00-\x1f\x7f]+)?(?:#[^\s\x00-\x1f\x7f]+)?"
)


class LinkResolver:
    """`resolve_href` against one page, each target resolved once; a root-relative target
    of the plain kind most links are is joined to the page's origin without `urljoin`
    (which costs about as much as rendering the rest of a link)."""

    __slots__ = ("_base_url", "_origin", "_targets")

    def __init__(self, base_url: str | None) -> None:
        self._base_url = base_url
        self._targets: dict[str | None, str | None] = {}
        self._origin: str | None = None
        if base_url:
            try:
                parts = urlsplit(base_url)
            except ValueError:
                parts = None
            if parts is not None and parts.scheme in ("http", "https") and parts.netloc:
                self._origin = f"{parts.scheme}://{parts.netloc}"

    def __call__(self, href: str | None) -> str | None:
        targets = self._targets
        if href in targets:
            return targets[href]
        origin = self._origin
        if (
            origin is not None
            and href
            and href[0] == "/"
            and len(href) <= MAX_HREF_CHARS
            and _PLAIN_ROOT_RELATIVE.fullmatch(href)
        ):
            target: str | None = origin + href
        else:
            target = resolve_href(href, self._base_url)
        targets[href] = target
        return target


def resolve_href(href: str | None, base_url: str | None) -> str | None:
    """A link's target resolved against the page, or None when it is no place to go: empty,
    a fragment of this page, too long, or of a scheme other than http(s), mailto and ftp
    (`javascript:`, `data:`, `vbscript:`, however spelt: `urlsplit` drops the tabs and line
    breaks browsers ignore). Without a base a relative target stays relative."""
    target = (href or "").strip()
    if not target or target.startswith("#") or len(target) > MAX_HREF_CHARS:
        return None
    try:
        if base_url:
            target = urljoin(base_url, target)
        scheme = urlsplit(target).scheme.lower()
    except ValueError:
        return None
    if scheme not in _LINK_SCHEMES and (scheme or base_url):
        return None
    return target


def _destination(target: str) -> str:
    """A link or image target as Markdown reads it: spaces encoded, in <> when it has
    parentheses or angle brackets."""
    if " " in target or not target.isprintable():  # every other space is unprintable
        target = _WHITESPACE.sub("%20", target)
    if "(" in target or ")" in target or "<" in target or ">" in target:
        target = "<" + target.replace("<", "%3C").replace(">", "%3E") + ">"
    return target


def _link(inner: str, target: str | None) -> str:
    core = inner.strip()
    if not core or target is None or "\n" in core:
        return inner
    if "![" in core:  # an image in the link keeps its own syntax
        core = "".join(
            piece if number % 2 else piece.replace("[", "\\[").replace("]", "\\]")
            for number, piece in enumerate(_IMAGE_IN_LINK.split(core))
        )
    else:
        core = core.replace("[", "\\[").replace("]", "\\]")
    lead = " " if inner[:1].isspace() else ""
    trail = " " if inner[-1:].isspace() else ""
    return f"{lead}[{core}]({_destination(target)}){trail}"


def _code_span(code: str) -> str:
    longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
    ticks = "`" * (longest + 1)
    core = code.strip()
    pad = " " if core.startswith("`") or core.endswith("`") else ""
    lead = " " if code[:1].isspace() else ""
    trail = " " if code[-1:].isspace() else ""
    return f"{lead}{ticks}{pad}{core}{pad}{ticks}{trail}"


def _preformatted_text(el: etree._Element) -> str:
    parts: list[str] = []
    for node in el.iter():
        if node is not el and node.tag == "br":
            parts.append("\n")
        if node.text and isinstance(node.tag, str) and node.tag not in _SKIPPED:
            parts.append(node.text)
        if node is not el and node.tail:
            parts.append(node.tail)
    return "".join(parts).replace("\r\n", "\n").replace("\u00a0", " ")


def _code_language(el: etree._Element) -> str:
    """The language a <pre>, its <code> or their wrappers name (Prism, highlight.js, GitHub,
    Sphinx, Pandoc, SyntaxHighlighter class conventions), or ""."""
    candidates = [el]
    code = el.find(".//code")
    if code is not None:
        candidates.append(code)
    candidates.extend(itertools.islice(el.iterancestors(), 2))
    for node in candidates:
        language = (node.get("data-lang") or node.get("data-language") or "").lower()
        if not re.fullmatch(r"[a-z0-9_+#.-]{1,30}", language):
            match = _LANGUAGE.search((node.get("class") or "")[:300].lower())
            language = match.group(1) if match else ""
        if language and language not in _NO_LANGUAGE:
            return language
    return ""


def _block_holders(root: etree._Element | None) -> set[etree._Element]:
    """The elements with a block element below them: one walk for the whole tree, where
    searching each inline element's subtree costs depth x size on nested inline markup."""
    holders: set[etree._Element] = set()
    if root is None:
        return holders
    for block in root.iter(*_BLOCKS):
        for ancestor in block.iterancestors():
            if ancestor in holders:
                break
            holders.add(ancestor)
    return holders


def _table_rows(table: etree._Element) -> list[list[etree._Element]]:
    """The table's rows (not those of tables inside it): the head's first, the foot's last,
    wherever the markup puts them."""
    head: list[list[etree._Element]] = []
    body: list[list[etree._Element]] = []
    foot: list[list[etree._Element]] = []
    for row in table.iter("tr"):
        # rows of nested tables belong to those tables
        owner = next(row.iterancestors("table"), None)
        if owner is not table:
            continue
        section = row.getparent()
        group = section.tag if section is not None else None
        target = head if group == "thead" else foot if group == "tfoot" else body
        target.append([cell for cell in row if cell.tag in ("td", "th")])
    return head + body + foot


def _header_row_count(table: etree._Element, rows: list[list[etree._Element]]) -> int:
    """How many leading rows are the table's header: those of its `<thead>`, else the
    leading rows made of `<th>` cells only."""
    head = sum(
        1 for row in table.iter("tr")
        if (parent := row.getparent()) is not None and parent.tag == "thead"
        and next(row.iterancestors("table"), None) is table
    )
    if head:
        return head
    count = 0
    for row in rows:
        if not row or any(cell.tag != "th" for cell in row):
            break
        count += 1
    return count if count < len(rows) else min(count, 1)


def _unique(texts: Iterable[str]) -> list[str]:
    """The texts in order, each once and none empty (a header cell spanning two rows or
    columns is read once)."""
    seen: list[str] = []
    for text in texts:
        if text and text not in seen:
            seen.append(text)
    return seen


def _definition_items(dl: etree._Element) -> Iterator[etree._Element]:
    """A definition list's terms and definitions in order; `<div>` groups are looked into."""
    for child in dl:
        if not isinstance(child.tag, str) or child.tag in _SKIPPED:
            continue
        if child.tag == "div" and any(item.tag in ("dt", "dd") for item in child):
            yield from (item for item in child if isinstance(item.tag, str))
        else:
            yield child


def _colspan(cell: etree._Element) -> int:
    return _span(cell.get("colspan"), MAX_COLSPAN)


def _rowspan(cell: etree._Element) -> int:
    return _span(cell.get("rowspan"), MAX_ROWSPAN)


def _span(value: str | None, cap: int) -> int:
    if value is None:
        return 1
    value = value.strip()
    if not value.isdigit() or len(value) > 3:
        return 1
    return min(max(int(value), 1), cap)
