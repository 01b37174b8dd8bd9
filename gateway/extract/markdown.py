"""Render an HTML subtree as Markdown, or as plain text with paragraph breaks.

Markdown keeps headings, lists (nested), links (`javascript:`, fragment-only and data links
become their text), fenced code with its language, inline code, emphasis, blockquotes and
simple tables; images are left out. Plain text keeps the same blocks without markup.
One Renderer per call: it holds the output being built.
"""

from __future__ import annotations

import itertools
import re
import time
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
        self, *, markdown: bool, deadline: float | None = None, base_url: str | None = None
    ) -> None:
        self.markdown = markdown
        self.deadline = deadline
        self.base_url = base_url
        # pages link to the same places again and again: each href is resolved once
        self._target = LinkResolver(base_url)
        self.headings: list[tuple[int, str]] = []
        self._seen = 0
        # the elements that hold a block element somewhere below them, found on first need
        self._block_holders: set[etree._Element] | None = None
        self._root: etree._Element | None = None

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
            text = _squash_inline(self._inline_children(el, depth)).strip()
            if text:
                plain = _squash_inline("".join(el.itertext())).strip()
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
        lines: list[list[str]] = []
        for row in rows:
            cells: list[str] = []
            for cell in row:
                text = _squash_inline(
                    self._inline_children(cell, depth + 1).replace("\n", " ")
                ).strip()
                if self.markdown:
                    text = text.replace("|", "\\|")
                cells.append(text)
                cells.extend("" for _ in range(_colspan(cell) - 1))
            if any(cells):
                lines.append(cells + [""] * (width - len(cells)))
        if not lines:
            return
        caption = el.find("caption")
        if caption is not None:
            text = _squash_inline("".join(caption.itertext())).strip()
            if text:
                out.append(text)
        if self.markdown:
            rendered = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * width]
            rendered.extend("| " + " | ".join(cells) + " |" for cells in lines[1:])
        else:
            rendered = [" | ".join(cell for cell in cells if cell) for cells in lines]
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
            # alt text describes a picture, not the page's text: readers of the page never
            # see it and it adds words no main text has (measured on both benchmarks)
            return ""
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


def _link(inner: str, target: str | None) -> str:
    core = inner.strip()
    if not core or target is None or "\n" in core:
        return inner
    if " " in target or not target.isprintable():  # every other space is unprintable
        target = _WHITESPACE.sub("%20", target)
    if "(" in target or ")" in target or "<" in target or ">" in target:
        target = "<" + target.replace("<", "%3C").replace(">", "%3E") + ">"
    core = core.replace("[", "\\[").replace("]", "\\]")
    lead = " " if inner[:1].isspace() else ""
    trail = " " if inner[-1:].isspace() else ""
    return f"{lead}[{core}]({target}){trail}"


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
    rows: list[list[etree._Element]] = []
    for row in table.iter("tr"):
        # rows of nested tables belong to those tables
        owner = next(row.iterancestors("table"), None)
        if owner is not table:
            continue
        rows.append([cell for cell in row if cell.tag in ("td", "th")])
    return rows


def _colspan(cell: etree._Element) -> int:
    value = cell.get("colspan")
    if value is None:
        return 1
    value = value.strip()
    if not value.isdigit() or len(value) > 3:
        return 1
    return min(max(int(value), 1), MAX_COLSPAN)
