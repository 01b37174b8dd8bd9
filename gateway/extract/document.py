"""extract(): a response body and its Content-Type -> a Document, per the requested mode.

Modes: `auto` turns HTML into Markdown of the main content, pretty-prints JSON
and passes other text through; `markdown` also converts bodies that are HTML by their look
when their type is missing; `text` gives HTML's main content as plain text and other bodies
decoded; `raw` gives the decoded body. Pure and thread-safe: no I/O, no shared state.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from gateway.extract.byline import page_byline
from gateway.extract.charset import (
    decode_text_utf8,
    is_html_type,
    looks_like_html,
    media_type,
)
from gateway.extract.content import (
    ATTEMPTS,
    ENOUGH_CONTENT_CHARS,
    DeadlineExceeded,
    drop_menus,
    select_content,
    strip_boilerplate,
)
from gateway.extract.markdown import Renderer
from gateway.extract.tree import (
    declares_article,
    main_heading,
    page_description,
    page_title,
    parse_html,
)

MODES = ("auto", "markdown", "text", "raw", "page")
WHOLE_PAGE_SHARE = 0.5
NOTE_EMPTY = "the page has no readable text in its HTML (it may need scripts to show it)"
NOTE_NO_PROSE = (
    "no main content found: the page has no paragraphs of text (navigation, links or "
    "short labels only); this is all of its readable text"
)


class ExtractError(Exception):
    """What cannot be extracted: an unknown mode, or the deadline passed."""


@dataclass(frozen=True, slots=True)
class Document:
    title: str | None
    description: str | None
    headings: tuple[tuple[int, str], ...]  # (level, text) of the main content's headings
    text: str  # the extracted text (Markdown for HTML in auto/markdown)
    mode: str  # the mode actually applied: "markdown" | "text" | "raw" | "json"
    # `text` in UTF-8 when that came for free (a valid UTF-8 body taken as it is), else None
    utf8: bytes | None = field(default=None, compare=False, repr=False)
    # HTML only: whether main content was found, and when not, why (None for other bodies)
    main_content: bool | None = None
    note: str | None = None
    # HTML only: the main heading and the byline line that `text` starts with, when found
    heading: str | None = None
    byline: str | None = None


def is_json_type(mtype: str) -> bool:
    return mtype in ("application/json", "text/json") or mtype.endswith("+json")


def extract(
    body: bytes,
    content_type: str,
    mode: str = "auto",
    *,
    deadline_s: float | None = None,
    base_url: str | None = None,
) -> Document:
    """The readable text of `body`; raises ExtractError past `deadline_s` seconds of work.

    Markdown links are resolved against `base_url` (the page's URL) when given."""
    if mode not in MODES:
        raise ExtractError(f"unknown extract mode {mode!r}; expected one of {', '.join(MODES)}")
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    mtype = media_type(content_type)
    if mode == "raw":
        text, utf8 = decode_text_utf8(body, content_type)
        return Document(None, None, (), text, "raw", utf8)
    html = is_html_type(mtype) or (
        mode == "markdown"
        and mtype in ("", "application/octet-stream", "text/plain")
        and looks_like_html(body[:1024])
    )
    if html:
        return _extract_html(
            body, content_type, markdown=mode != "text", deadline=deadline,
            whole=mode == "page", base_url=base_url,
        )
    text, utf8 = decode_text_utf8(body, content_type)
    if mode != "text" and is_json_type(mtype):
        pretty = pretty_json(text)
        if pretty is not None:
            return Document(None, None, (), pretty, "json")
    return Document(None, None, (), text, "text", utf8)


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ExtractError("extraction deadline passed")


def _extract_html(
    body: bytes,
    content_type: str,
    *,
    markdown: bool,
    deadline: float | None,
    whole: bool = False,
    base_url: str | None = None,
) -> Document:
    mode = "markdown" if markdown else "text"
    if whole:
        return _whole_page(body, content_type, deadline, base_url)
    best: tuple[etree._Element, int, int] | None = None
    title = description = heading = byline = None
    page_prose = 0
    scored = article = False
    for number, attempt in enumerate(ATTEMPTS):
        _check(deadline)
        root = parse_html(body, content_type)
        if root is None:
            return Document(None, None, (), "", mode, main_content=False, note=NOTE_EMPTY)
        if number == 0:
            title = page_title(root)
            description = page_description(root)
            article = declares_article(root)
            # read before selection removes them: the heading sits above the article's
            # body, the byline among the furniture that goes
            heading = main_heading(root, title)
            byline = page_byline(root, article)
        body_el = root.find("body")
        if body_el is None:
            body_el = root
        try:
            selection = select_content(body_el, attempt, title, deadline)
        except DeadlineExceeded:
            raise ExtractError("extraction deadline passed") from None
        content = selection.content
        scored = scored or selection.scored
        if number == 0:
            page_prose = selection.page_prose
        # what an attempt found is measured in words, never in Markdown's link targets
        found, prose = selection.chars, selection.prose
        if best is None or found > best[1]:
            best = (content, found, prose)
        if prose >= ENOUGH_CONTENT_CHARS:
            break
    assert best is not None
    content, found, prose = best
    if not article and scored and prose < WHOLE_PAGE_SHARE * page_prose:
        # The chosen blocks hold under that share of the prose left once the boilerplate is
        # gone, on a page that does not say it is an article (whose rest is teasers): a
        # page of many small parts (listings, shops, service pages) reads better whole, its
        # menus removed, than as its biggest piece.
        root = parse_html(body, content_type)
        if root is not None:
            content = root.find("body")
            if content is None:
                content = root
            try:
                strip_boilerplate(content, ATTEMPTS[0], deadline)
                drop_menus(content, deadline)
            except DeadlineExceeded:
                raise ExtractError("extraction deadline passed") from None
    renderer = Renderer(
        markdown=markdown, deadline=deadline, base_url=base_url, main_heading=heading
    )
    try:
        text = renderer.render(content)
    except DeadlineExceeded:
        raise ExtractError("extraction deadline passed") from None
    headings = tuple(renderer.headings)
    note = None
    if not text.strip():
        note = NOTE_EMPTY
    else:
        if not scored:
            note = NOTE_NO_PROSE
        # the page's name and who wrote it when, once, above what it says
        top = []
        if heading:
            top.append(("# " + heading.replace("\n", " ")) if markdown else heading)
            headings = ((1, heading), *headings)
        line = byline.line() if byline is not None else ""
        if line:
            top.append(line)
        if top:
            text = "\n\n".join([*top, text])
    return Document(
        title, description, headings, text, mode, main_content=note is None, note=note,
        heading=heading if text.strip() else None,
        byline=(byline.line() or None) if byline is not None and text.strip() else None,
    )


def _whole_page(
    body: bytes, content_type: str, deadline: float | None, base_url: str | None
) -> Document:
    """The whole page's body as Markdown: no main-content selection, no boilerplate removal
    beyond what never renders (scripts, styles, forms)."""
    root = parse_html(body, content_type)
    if root is None:
        return Document(None, None, (), "", "markdown")
    body_el = root.find("body")
    renderer = Renderer(markdown=True, deadline=deadline, base_url=base_url)
    try:
        text = renderer.render(body_el if body_el is not None else root)
    except DeadlineExceeded:
        raise ExtractError("extraction deadline passed") from None
    return Document(
        page_title(root), page_description(root), tuple(renderer.headings), text, "markdown"
    )


def pretty_json(text: str) -> str | None:
    """JSON with 2-space indents, keys in document order (duplicates kept); None if invalid."""
    try:
        value = json.loads(text, object_pairs_hook=_Pairs)
        return _dump(value, "")
    except (ValueError, RecursionError):
        return None


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs, so duplicate keys survive pretty-printing."""


def _dump(value: Any, indent: str) -> str:
    inner = indent + "  "
    if isinstance(value, _Pairs):
        if not value:
            return "{}"
        items = [
            f"{inner}{json.dumps(key, ensure_ascii=False)}: {_dump(item, inner)}"
            for key, item in value
        ]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [inner + _dump(item, inner) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)
