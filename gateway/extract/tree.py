"""HTML bytes -> an lxml tree, its title and description; and the text measures the others use.

libxml2 parses with recovery on, `huge_tree` off (it caps nesting at 255 levels and rejects
giant text nodes), no network, no comments or processing instructions. A new parser per call:
lxml parsers must not be shared between threads.
"""

from __future__ import annotations

from lxml import etree

from gateway.extract.charset import sniff_encoding


def parse_html(body: bytes, content_type: str) -> etree._Element | None:
    """The document's root element, or None when there is nothing to parse."""
    codec, skip = sniff_encoding(body, content_type)
    if codec == "utf-8":
        # libxml2 decodes UTF-8 itself and turns broken sequences and NULs into U+FFFD
        data = body[skip:] if skip else body
    else:
        data = body[skip:].decode(codec, errors="replace").encode("utf-8", errors="replace")
    parser = etree.HTMLParser(
        encoding="utf-8",
        recover=True,
        huge_tree=False,
        no_network=True,
        remove_comments=True,
        remove_pis=True,
        remove_blank_text=False,
        compact=True,
        default_doctype=False,
    )
    try:
        root = etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError):
        return None
    return root


def squash(text: str) -> str:
    """Whitespace runs (newlines, NBSP) as single spaces, stripped."""
    return " ".join(text.split())


def text_length(el: etree._Element) -> int:
    """Characters of an element's text once whitespace runs count as one."""
    words = "".join(el.itertext()).split()
    return sum(map(len, words)) + len(words) - 1 if words else 0


def text_of(el: etree._Element) -> str:
    return "".join(el.itertext())


def _meta_content(root: etree._Element, *keys: str) -> str | None:
    wanted = {key.lower(): rank for rank, key in enumerate(keys)}
    best: tuple[int, str] | None = None
    for meta in root.iter("meta"):
        key = (meta.get("property") or meta.get("name") or "").strip().lower()
        rank = wanted.get(key)
        if rank is None:
            continue
        content = squash(meta.get("content") or "")
        if content and (best is None or rank < best[0]):
            best = (rank, content)
    return best[1] if best else None


MAX_TITLE_CHARS = 1000
MAX_DESCRIPTION_CHARS = 4000


def page_title(root: etree._Element) -> str | None:
    """og:title (no " | Site" suffix), else <title>, else the first <h1>."""
    title = _meta_content(root, "og:title", "twitter:title")
    if not title:
        for el in root.iter("title"):
            title = squash(text_of(el))
            if title:
                break
    if not title:
        for el in root.iter("h1"):
            title = squash(text_of(el))
            if title:
                break
    return title[:MAX_TITLE_CHARS] if title else None


def page_description(root: etree._Element) -> str | None:
    description = _meta_content(root, "description", "og:description", "twitter:description")
    return description[:MAX_DESCRIPTION_CHARS] if description else None
