"""An article's byline and date, where its page marks them: one line such as
`By Ada Lovelace · 2025-09-04`.

Read from the parsed page before anything is removed from it: schema.org (JSON-LD and
microdata `author`/`datePublished` of an article), then, on pages that say they are articles,
`rel=author` links, common byline classes, `article:published_time` and the first `<time>`.
Bounded: JSON-LD scripts over a size are skipped, names and dates are capped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lxml import etree

from gateway.extract.tree import squash, text_of

MAX_JSON_LD_CHARS = 200_000
MAX_JSON_LD_SCRIPTS = 8
MAX_JSON_NODES = 2000
MAX_NAME_CHARS = 80
MAX_AUTHORS = 3
MAX_DATE_CHARS = 40
MAX_BYLINE_ELEMENTS = 200
MAX_FEW = 10
# schema.org types of articles (and their subtypes that pages use)
_ARTICLE_TYPES = frozenset({
    "article", "newsarticle", "blogposting", "reportagenewsarticle", "analysisnewsarticle",
    "opinionnewsarticle", "reviewnewsarticle", "backgroundnewsarticle", "techarticle",
    "scholarlyarticle", "report", "liveblogposting", "advertisercontentarticle",
    "satiricalarticle", "medicalscholarlyarticle",
})
_BYLINE_CLASS = re.compile(
    r"(?:^|[\s_-])(?:byline|by-line|author|author-name|authorname|posted-by|postedby|writtenby"
    r"|written-by|contributor)(?:[\s_-]|$)"
)
_BY = re.compile(r"^(?:(?:written|posted|published|words|text|story)\s+)?by\s*:?\s+", re.I)
_ISO_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[T ]\d|$)")
_UNLIKELY_PLACES = frozenset({"nav", "footer", "aside", "menu", "dialog", "template"})


@dataclass(frozen=True, slots=True)
class Byline:
    authors: tuple[str, ...]
    date: str | None

    def line(self) -> str:
        """`By A, B and C · date`, or either part alone."""
        parts = []
        if self.authors:
            names = list(self.authors)
            joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            parts.append("By " + joined)
        if self.date:
            parts.append(self.date)
        return " · ".join(parts)


def page_byline(root: etree._Element, article: bool) -> Byline | None:
    """Who wrote the page and when, when it marks that; `article`: whether the page says it
    is an article (a forum's or a shop's authors and dates are not one byline). The markup
    in the body is read only on pages that say so, here or in JSON-LD (one walk of the page
    costs a twentieth of an extraction)."""
    authors: list[str] = []
    date: str | None = None
    marked = False
    for node in _json_ld_articles(root):
        marked = True
        if not authors:
            authors = _names(node.get("author"))
        if date is None:
            date = _date(node.get("datePublished"))
        if authors and date:
            break
    if (article or marked) and (not authors or date is None):
        marks = _Marks(root)
        found_authors, found_date = marks.microdata()
        authors = authors or found_authors or marks.linked_authors() or marks.classed_author()
        date = date or found_date or _published_meta(root) or marks.first_time()
    if not authors and date is None:
        return None
    return Byline(tuple(authors), date)


def _json_ld_articles(root: etree._Element) -> Iterator[dict[str, Any]]:
    scripts = 0
    for script in root.iter("script"):
        if "ld+json" not in (script.get("type") or "").lower():
            continue
        scripts += 1
        if scripts > MAX_JSON_LD_SCRIPTS:
            return
        text = script.text or ""
        if len(text) > MAX_JSON_LD_CHARS:
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            continue
        yield from _article_nodes(data)


def _article_nodes(data: Any) -> Iterator[dict[str, Any]]:
    """The objects of article types in a JSON-LD value (top level, `@graph`, lists),
    breadth first and bounded."""
    queue = [data]
    seen = 0
    while queue and seen < MAX_JSON_NODES:
        value = queue.pop(0)
        seen += 1
        if isinstance(value, list):
            queue.extend(value[:100])
            continue
        if not isinstance(value, dict):
            continue
        kinds = value.get("@type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if any(isinstance(kind, str) and kind.lower() in _ARTICLE_TYPES for kind in kinds):
            yield value
        for key in ("@graph", "mainEntity", "mainEntityOfPage", "itemListElement"):
            inner = value.get(key)
            if isinstance(inner, (dict, list)):
                queue.append(inner)


def _names(value: Any) -> list[str]:
    """Authors' names from a schema.org `author` value (text, Person, Organization, lists)."""
    items = value if isinstance(value, list) else [value]
    names: list[str] = []
    for item in items[:20]:
        if isinstance(item, dict):
            item = item.get("name")
            if isinstance(item, list):
                item = item[0] if item else None
        if isinstance(item, str):
            name = _clean_name(item)
            if name and name not in names:
                names.append(name)
        if len(names) >= MAX_AUTHORS:
            break
    return names


def _clean_name(text: str) -> str | None:
    name = _BY.sub("", squash(text[: MAX_NAME_CHARS * 4]))
    if not name or len(name) > MAX_NAME_CHARS or "://" in name or name.startswith("/"):
        return None
    if not any(char.isalpha() for char in name):
        return None
    return name


def _date(value: Any) -> str | None:
    """A date as the page gives it: an ISO timestamp's day, else its text (capped)."""
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    text = squash(value[: MAX_DATE_CHARS * 4])
    match = _ISO_DATE.match(text)
    if match:
        return match.group(1)
    if not text or len(text) > MAX_DATE_CHARS or not any(char.isdigit() for char in text):
        return None
    return text


class _Marks:
    """The elements of a page that can say who wrote it and when, from one walk: the first
    article's microdata scope, `itemprop`s, `rel=author` links, byline-classed elements and
    `<time>`s (a few of each)."""

    __slots__ = ("scope", "props", "links", "classed", "times")

    def __init__(self, root: etree._Element) -> None:
        self.scope: etree._Element | None = None
        self.props: list[etree._Element] = []
        self.links: list[etree._Element] = []
        self.classed: list[etree._Element] = []
        self.times: list[etree._Element] = []
        for el in root.iter():
            tag = el.tag
            if tag == "time":
                if len(self.times) < MAX_FEW:
                    self.times.append(el)
                continue
            keys = el.keys()
            if not keys or not isinstance(tag, str):
                continue
            if "class" in keys and len(self.classed) < MAX_FEW:
                label = (el.get("class") or "")[:300].lower()
                if ("author" in label or "by" in label or "writ" in label
                        or "contributor" in label) and _BYLINE_CLASS.search(label):
                    self.classed.append(el)
            if "itemprop" in keys and len(self.props) < MAX_BYLINE_ELEMENTS:
                self.props.append(el)
            if "itemtype" in keys and self.scope is None:
                kind = (el.get("itemtype") or "").strip().rstrip("/").rsplit("/", 1)[-1].lower()
                if kind in _ARTICLE_TYPES:
                    self.scope = el
            if (
                tag == "a" and "rel" in keys and len(self.links) < MAX_FEW
                and "author" in (el.get("rel") or "").lower().split()
            ):
                self.links.append(el)

    def microdata(self) -> tuple[list[str], str | None]:
        """`author` and `datePublished` of the article's microdata (of any item when the page
        has no article scope)."""
        authors: list[str] = []
        date: str | None = None
        scope = self.scope
        for el in self.props:
            if scope is not None and el is not scope and scope not in set(el.iterancestors()):
                continue
            props = (el.get("itemprop") or "").split()
            if "author" in props and len(authors) < MAX_AUTHORS:
                named = next(
                    (inner for inner in el.iterdescendants()
                     if "name" in (inner.get("itemprop") or "").split()),
                    None,
                )
                source = named if named is not None else el
                name = _clean_name(source.get("content") or text_of(source))
                if name and name not in authors:
                    authors.append(name)
            if "datePublished" in props and date is None:
                date = _date(el.get("content") or el.get("datetime") or text_of(el))
        return authors, date

    def linked_authors(self) -> list[str]:
        authors: list[str] = []
        for a in self.links:
            if _in_unlikely_place(a):
                continue
            name = _clean_name(text_of(a))
            if name and name not in authors:
                authors.append(name)
                if len(authors) >= MAX_AUTHORS:
                    break
        return authors

    def classed_author(self) -> list[str]:
        for el in self.classed:
            if _in_unlikely_place(el):
                continue
            name = _clean_name(text_of(el))
            if name:
                return [name]
        return []

    def first_time(self) -> str | None:
        for el in self.times:
            if _in_unlikely_place(el):
                continue
            date = _date(el.get("datetime") or text_of(el))
            if date:
                return date
        return None


def _in_unlikely_place(el: etree._Element) -> bool:
    return any(ancestor.tag in _UNLIKELY_PLACES for ancestor in el.iterancestors())


def _published_meta(root: etree._Element) -> str | None:
    head = root.find("head")
    for meta in (head if head is not None else root).iter("meta"):
        key = (meta.get("property") or meta.get("name") or "").strip().lower()
        if key in ("article:published_time", "datepublished", "date"):
            date = _date(meta.get("content"))
            if date:
                return date
    return None
