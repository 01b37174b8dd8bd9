"""Which part of an HTML page is its main content: boilerplate removal and candidate scoring.

After Mozilla Readability's algorithm: paragraphs score their ancestors, the best-scoring block
(after discounting its link text) wins, sibling blocks that score near it join it, and then
link-heavy, form-like or image-only blocks inside it are removed. The tree passed in is
modified; callers need a fresh one per attempt.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from lxml import etree

from gateway.extract.tree import (
    DeadlineExceeded,
    SubtreeText,
    check_every,
    squash,
    text_length,
    text_of,
)

__all__ = [
    "ATTEMPTS", "ENOUGH_CONTENT_CHARS", "Attempt", "DeadlineExceeded", "Selection",
    "drop_menus", "select_content", "strip_boilerplate",
]

# Elements that never hold readable main content.
_JUNK_TAGS = (
    "script", "style", "noscript", "template", "iframe", "frame", "frameset", "svg", "canvas",
    "object", "embed", "applet", "link", "meta", "base", "input", "button", "select",
    "textarea", "option", "optgroup", "datalist", "nav", "aside", "footer", "dialog", "map",
    "area", "audio", "video", "source", "track", "math", "head", "menu",
)
_JUNK_TAG_SET = frozenset(_JUNK_TAGS)
# Junk tags that hold other elements, where an unclosed one can swallow the rest of a page.
_JUNK_CONTAINERS = frozenset({"button", "nav", "aside", "footer", "menu", "dialog", "select"})
_UNLIKELY_ROLES = frozenset(
    {"menu", "menubar", "complementary", "navigation", "alert", "alertdialog", "dialog",
     "banner", "contentinfo", "search", "toolbar", "tooltip"}
)
_UNLIKELY = re.compile(
    r"-ad-|ai2html|banner|breadcrumbs|combx|comment|community|cover-wrap|disqus|extra|footer"
    r"|gdpr|header|legends|menu|related|remark|replies|rss|shoutbox|sidebar|skyscraper|social"
    r"|sponsor|supplemental|ad-break|agegate|pagination|pager|popup|yom-remote"
)
_MAYBE_CANDIDATE = re.compile(r"and|article|body|column|content|main|shadow")
_POSITIVE = re.compile(
    r"article|body|content|entry|hentry|h-entry|main|page|pagination|post|text|blog|story"
)
_NEGATIVE = re.compile(
    r"-ad-|hidden|^hid$| hid$| hid |^hid |banner|combx|comment|com-|contact|foot|footer"
    r"|footnote|gdpr|masthead|media|meta|outbrain|promo|related|scroll|share|shoutbox|sidebar"
    r"|skyscraper|sponsor|shopping|tags|tool|widget"
)
# Small widgets that sit inside articles: removed when they hold little text.
_WIDGET = re.compile(
    r"share|sharing|social|cookie|consent|newsletter|subscri|signup|sign-up|promo|advert"
    r"|taboola|outbrain|recommend|related|paywall|print-only|sr-only|visually-hidden"
    r"|screen-reader|byline|author|dateline|writtenby|timestamp|caption|credit|gallery"
    r"|slideshow|figcaption"
)
# Reader comments: never the main content, whichever attempt.
_COMMENTS = re.compile(
    r"(?:^|[\s_-])(?:comments?|commentlist|comment-list|disqus\w*|respond|replies)(?:[\s_-]|$)"
)
# Content a click discloses (tab panels, accordions, drawers, "read more" parts)
_DISCLOSURE = re.compile(r"tab|accordion|collaps|panel|drawer|toggle|expand|disclos|details")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)

_BLOCK_CHILDREN = frozenset(
    {"a", "blockquote", "dl", "div", "img", "ol", "p", "pre", "table", "ul", "section",
     "article", "header", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "form", "main"}
)
_TAG_BASE = {
    "div": 5, "article": 5, "main": 5, "section": 0, "pre": 3, "td": 3, "blockquote": 3,
    "address": -3, "ol": -3, "ul": -3, "dl": -3, "dd": -3, "dt": -3, "li": -3, "form": -3,
    "h1": -5, "h2": -5, "h3": -5, "h4": -5, "h5": -5, "h6": -5, "th": -5,
}
_CLEANED_TAGS = ("form", "fieldset", "table", "ul", "ol", "dl", "div", "section", "figure")
_COMMAS = re.compile(r"[,\u060c\ufe50\ufe10\ufe11\u2e41\u2e34\u2e32\uff0c]")
_SENTENCE_END = re.compile(r"\.( |$)")

MIN_PARAGRAPH_CHARS = 25
ENOUGH_CONTENT_CHARS = 500
WIDGET_MAX_CHARS = 500
MAX_LABEL_CHARS = 300
NOSCRIPT_CONTENT_CHARS = 200  # more text than a "please enable JavaScript" notice
MOST_OF_PAGE = 0.5
WIDEN_SHARE = 0.7
MENU_MIN_LINKS = 5
MENU_LINK_SHARE = 0.8
MENU_LINK_CHARS = 25  # a menu entry's few words, against a listing's names and titles
WIDEN_MIN_PROSE = 0.45


@dataclass(frozen=True, slots=True)
class Attempt:
    """Which of the riskier heuristics an attempt uses; later attempts relax them."""

    strip_unlikely: bool = True
    weigh_classes: bool = True
    clean_conditionally: bool = True


ATTEMPTS = (Attempt(), Attempt(strip_unlikely=False),
            Attempt(strip_unlikely=False, weigh_classes=False),
            Attempt(strip_unlikely=False, weigh_classes=False, clean_conditionally=False))


def _append_before(el: etree._Element, parent: etree._Element, text: str) -> None:
    """Append `text` to what precedes `el` in its parent (a sibling's tail or the parent's text)."""
    previous = el.getprevious()
    if previous is not None:
        previous.tail = (previous.tail or "") + text
    else:
        parent.text = (parent.text or "") + text


def remove(el: etree._Element) -> None:
    """Detach an element, keeping the text that follows it."""
    parent = el.getparent()
    if parent is None:
        return
    if el.tail:
        _append_before(el, parent, el.tail)
    parent.remove(el)


def unwrap(el: etree._Element) -> None:
    """Replace an element by its content (its text, children and tail stay where it was)."""
    parent = el.getparent()
    if parent is None:
        return
    index = parent.index(el)
    text, tail = el.text or "", el.tail or ""
    children = list(el)
    if children:
        children[-1].tail = (children[-1].tail or "") + tail
    else:
        text += tail
    if text:
        _append_before(el, parent, text)
    parent[index : index + 1] = children


# Junk that never counts as a page's text (a framework's state in a script can be most of
# a page): removed first, in libxml2, before anything is measured
_CODE_TAGS = ("script", "style", "template")


def _page_length(body: etree._Element) -> int:
    """About how many characters of text a page has (whitespace runs counted once), in
    libxml2: XPath's normalize-space knows only ASCII whitespace, so an NBSP next to a space
    counts as a character where `_squashed_length` would merge them, a difference of a few
    characters in a page's worth that only the half-the-page threshold sees. Splitting a
    page's text into words in Python cost three times as much."""
    length = int(_NORMALIZED_LENGTH(body))
    return length + 1 if length else 0


_NORMALIZED_LENGTH = etree.XPath("string-length(normalize-space(.))")


def _squashed_length(text: str) -> int:
    words = text.split()
    return sum(map(len, words)) + len(words)


def _label(el: etree._Element) -> str:
    """class and id, lower-cased (the label patterns are matched without re.I, 6x faster) and
    capped, so a megabyte-long class attribute costs no more than a normal one."""
    cls = el.get("class")
    ident = el.get("id")
    if cls and ident:
        return (cls[:MAX_LABEL_CHARS] + " " + ident[:MAX_LABEL_CHARS]).lower()
    return (cls or ident or "")[:MAX_LABEL_CHARS].lower()


def _is_hidden(el: etree._Element) -> bool:
    """Hidden from readers, and not a part they can open (a tab, an accordion's panel)."""
    style = el.get("style")
    hidden = (
        el.get("hidden") is not None
        or el.get("aria-hidden") == "true"
        or bool(style and _HIDDEN_STYLE.search(style[:MAX_LABEL_CHARS]))
    )
    return hidden and not (
        (el.get("role") or "").strip().lower() == "tabpanel" or _DISCLOSURE.search(_label(el))
    )


def strip_boilerplate(
    body: etree._Element, attempt: Attempt, deadline: float | None = None
) -> None:
    """Remove what is never main content: junk tags, hidden and widget-like elements.

    A `<noscript>` with a page's worth of text is its content for readers without scripts
    (forum software puts the posts there): it stays, as plain blocks. An element that would
    go but holds most of the page's text stays too: recovering parsers nest the rest of a
    page inside a `<button>` or `<nav>` that was never closed, and scoring still ranks
    whatever is furniture in it; but not a `<nav>` (or other such container) beside the
    page's `<main>` or `<article>`: that one was closed, and is a mega menu.
    """
    etree.strip_elements(body, *_CODE_TAGS, with_tail=False)
    share_limit = max(int(_page_length(body) * MOST_OF_PAGE), NOSCRIPT_CONTENT_CHARS)
    doomed: list[etree._Element] = []
    unwrapped: list[etree._Element] = []
    small_widgets: list[etree._Element] = []
    # What is inside a doomed element goes with it: its subtree needs no reading (often half
    # of a page: headers, menus, comments, related stories).
    walk = etree.iterwalk(body, events=("start",))
    for count, (_, el) in enumerate(walk):
        check_every(deadline, count)
        tag = el.tag
        if tag in _JUNK_TAG_SET:
            if tag == "noscript" and _holds_text(el, NOSCRIPT_CONTENT_CHARS):
                unwrapped.append(el)
            elif (
                tag in _JUNK_CONTAINERS
                and _holds_text(el, share_limit, deadline)
                and not _content_beside(el, body)
            ):
                continue
            else:
                doomed.append(el)
                walk.skip_subtree()
            continue
        # most elements have no attributes; asking for their names once is cheaper than
        # looking up each attribute
        keys = el.keys()
        if not keys or not isinstance(tag, str):
            continue
        if tag == "body":
            continue
        if (
            (("hidden" in keys or "aria-hidden" in keys or "style" in keys) and _is_hidden(el))
            or ("role" in keys and (el.get("role") or "").strip().lower() in _UNLIKELY_ROLES)
            or (
                ("rel" in keys or "itemprop" in keys)
                and (el.get("rel") == "author" or "author" in (el.get("itemprop") or ""))
            )
        ):
            if not _holds_text(el, share_limit, deadline):
                doomed.append(el)
                walk.skip_subtree()
            continue
        if "class" not in keys and "id" not in keys:
            continue
        label = _label(el)
        if not label:
            continue
        comments, unlikely, widget = _label_verdict(label)
        if tag in ("article", "main"):
            continue
        if widget:
            small_widgets.append(el)
        elif (
            comments or (
                attempt.strip_unlikely and unlikely
                and tag not in ("a", "table", "td", "tr", "tbody")
            )
        ) and not _holds_text(el, share_limit, deadline):
            doomed.append(el)
            walk.skip_subtree()
    for el in doomed:
        remove(el)
    for el in unwrapped:
        unwrap(el)
    # A wrapper whose class merely mentions "share" or "author" keeps its content. Innermost
    # first: once a widget holds enough text, so do all its ancestors, which then need no
    # reading (nested widgets would otherwise cost depth x text).
    big: set[etree._Element] = set()
    for count, el in enumerate(reversed(small_widgets)):
        check_every(deadline, count)
        if el in big:
            continue
        if _holds_text(el, WIDGET_MAX_CHARS):
            for ancestor in el.iterancestors():
                if ancestor in big:
                    break
                big.add(ancestor)
        else:
            remove(el)


def _content_beside(el: etree._Element, body: etree._Element) -> bool:
    """Whether a `<main>` or an `<article>` with text lies outside `el` (neither in it nor
    around it): then `el` was closed where it should be, and is a big menu, not the rest
    of the page swallowed by a tag left open."""
    around = set(el.iterancestors())
    for landmark in body.iter("main", "article"):
        if landmark is el or landmark in around:
            continue
        if el in set(landmark.iterancestors()):
            continue
        if _holds_text(landmark, ENOUGH_CONTENT_CHARS):
            return True
    return False


def _holds_text(el: etree._Element, limit: int, deadline: float | None = None) -> bool:
    """Whether an element has at least `limit` characters of text; stops reading there, so
    nested widgets cost no more than their first few hundred characters each."""
    if limit > WIDGET_MAX_CHARS:
        # a big limit (a share of the page): measured in C, where most elements fall short
        # of it by their raw length already
        check_every(deadline, 0)
        raw = etree.tostring(el, method="text", encoding=str, with_tail=False)
        return len(raw) >= limit and _squashed_length(raw) >= limit
    total = 0
    for count, piece in enumerate(el.itertext()):
        check_every(deadline, count + 1)
        words = piece.split()
        total += sum(map(len, words)) + len(words)
        if total >= limit:
            return True
    return False


def class_weight(el: etree._Element) -> int:
    weight = 0
    for value in (el.get("class"), el.get("id")):
        if value:
            weight += _value_weight(value[:MAX_LABEL_CHARS])
    return weight


@functools.lru_cache(maxsize=4096)
def _value_weight(value: str) -> int:
    """A class or id value's weight: sites repeat a few hundred values across their pages, so
    each is matched once (the cache is bounded, and its values are capped in length)."""
    value = value.lower()
    return (25 if _POSITIVE.search(value) else 0) - (25 if _NEGATIVE.search(value) else 0)


@functools.lru_cache(maxsize=4096)
def _label_verdict(label: str) -> tuple[bool, bool, bool]:
    """(comments, unlikely, widget) for a lower-cased class-and-id label, matched once."""
    return (
        _COMMENTS.search(label) is not None,
        _UNLIKELY.search(label) is not None and not _MAYBE_CANDIDATE.search(label),
        _WIDGET.search(label) is not None,
    )


def link_density(
    el: etree._Element, length: int | None = None, deadline: float | None = None
) -> float:
    if length is None:
        length = text_length(el)
    if not length:
        return 0.0
    links = 0.0
    for count, a in enumerate(el.iter("a")):
        check_every(deadline, count + 1)
        href = a.get("href") or ""
        links += text_length(a) * (0.3 if href.startswith("#") else 1.0)
    return links / length


def _link_density(el: etree._Element, text: SubtreeText, deadline: float | None) -> float:
    """`link_density(el)` from the measured text."""
    length = text.length(el)
    return text.link_length(el, deadline) / length if length else 0.0


def _paragraphs(
    body: etree._Element, text: SubtreeText
) -> Iterator[tuple[etree._Element, int, str]]:
    """(first element to credit, text length, text) for each paragraph-like run of text at
    least MIN_PARAGRAPH_CHARS long (length as `text_length` counts; the text unsquashed).

    A div or section without block children counts as a paragraph (credits its parent); text
    lying directly in a div between blocks is a paragraph of that div (credits the div).
    """
    for el in body.iter("p", "pre", "td", "div", "section"):
        parent = el.getparent()
        if parent is None:
            continue
        holds_blocks = False
        if el.tag in ("div", "section"):
            for child in el:
                if child.tag in _BLOCK_CHILDREN:
                    holds_blocks = True
                    break
        if holds_blocks:
            direct = (el.text or "") + "".join(child.tail or "" for child in el)
            if len(direct) >= MIN_PARAGRAPH_CHARS:
                length = len(squash(direct))
                if length >= MIN_PARAGRAPH_CHARS:
                    yield el, length, direct
            continue
        length = text.length(el)
        if length >= MIN_PARAGRAPH_CHARS:
            yield parent, length, text.text(el)


def _score_candidates(
    body: etree._Element, attempt: Attempt, text: SubtreeText, deadline: float | None
) -> dict[etree._Element, float]:
    scores: dict[etree._Element, float] = {}
    # paragraphs share parents: each parent's chain of (ancestor, divider) is built once
    chains: dict[etree._Element, list[tuple[etree._Element, int]]] = {}
    for count, (first, length, raw) in enumerate(_paragraphs(body, text)):
        check_every(deadline, count)
        # squashing only removes whitespace: the commas are the same before and after
        commas = raw.count(",") if raw.isascii() else len(_COMMAS.findall(raw))
        score = 1 + commas + min(length // 100, 3)
        chain = chains.get(first)
        if chain is None:
            chain = chains[first] = _ancestor_chain(first, scores, attempt)
        for ancestor, divider in chain:
            scores[ancestor] += score / divider
    return scores


def _ancestor_chain(
    first: etree._Element, scores: dict[etree._Element, float], attempt: Attempt
) -> list[tuple[etree._Element, int]]:
    """The (up to) five elements a paragraph credits, each with its divider, initialised in
    `scores` with their tag and class bias on first sight."""
    chain = []
    for level, ancestor in enumerate(itertools.chain((first,), first.iterancestors())):
        if level >= 5 or ancestor.tag == "html":
            break
        if ancestor not in scores:
            base = _TAG_BASE.get(ancestor.tag, 0)
            if attempt.weigh_classes:
                base += class_weight(ancestor)
            scores[ancestor] = base
        chain.append((ancestor, 1 if level == 0 else (2 if level == 1 else level * 3)))
    return chain


@dataclass(frozen=True, slots=True)
class Selection:
    content: etree._Element  # a new element holding what was chosen
    page_prose: int  # the page's text outside links once its boilerplate was removed
    scored: bool  # whether any paragraph was found (else `content` is the whole page)
    # the text length of what was chosen, and of that outside links
    chars: int = 0
    prose: int = 0


def select_content(
    body: etree._Element, attempt: Attempt, title: str | None, deadline: float | None = None
) -> Selection:
    """The main content of `body` (moved out of it) in a new element.

    Raises DeadlineExceeded once `deadline` (time.monotonic()) has passed."""
    strip_boilerplate(body, attempt, deadline)
    # the tree stays as it is now until _prepare: its text is measured once for all questions
    text = SubtreeText(body, deadline)
    page_prose = text.length(body) - int(text.link_length(body, deadline))
    scores = _score_candidates(body, attempt, text, deadline)
    container = etree.Element("div")
    if not scores:
        container.append(body)
        chars = text.length(body)
        return Selection(container, page_prose, False, chars, page_prose)
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)[:10]
    adjusted = {el: score * (1 - _link_density(el, text, deadline)) for el, score in ranked}
    top, top_score = max(adjusted.items(), key=lambda item: item[1])
    top = _common_ancestor(top, top_score, adjusted, body)
    top = _climb(top, top_score, scores, adjusted, text, deadline)
    top = _widen(top, body, text, deadline)
    top_score = adjusted.get(top, scores.get(top, top_score))

    parent = top.getparent()
    siblings = [top] if parent is None else list(parent)
    threshold = max(10.0, top_score * 0.2)
    top_class = top.get("class") or ""
    kept: list[etree._Element] = []
    for sibling in siblings:
        if not isinstance(sibling.tag, str):
            continue
        keep = sibling is top
        if not keep:
            bonus = top_score * 0.2 if top_class and sibling.get("class") == top_class else 0
            # siblings moved into the container so far keep their subtrees: `text` still
            # measures them and the rest right
            if sibling in scores:
                sibling_score = scores[sibling] * (1 - _link_density(sibling, text, deadline))
                keep = sibling_score + bonus >= threshold
            if not keep and sibling.tag == "p":
                length = text.length(sibling)
                density = _link_density(sibling, text, deadline)
                keep = (length > 80 and density < 0.25) or (
                    0 < length <= 80
                    and density == 0
                    and _SENTENCE_END.search(squash(text.text(sibling))) is not None
                )
        if keep:
            # lxml moves the tail with the element; that text belongs to the old parent
            sibling.tail = None
            container.append(sibling)
            kept.append(sibling)
    removed = _prepare(container, attempt, scores, title, text, deadline)
    # measured after the furniture went (what is left is what renders), from the page's
    # measurement: the pieces of text of the blocks kept, less those of the blocks removed
    # (their subtrees are as they were)
    check_every(deadline, 0)
    remaining = text.remaining_length(kept, removed)
    if remaining is None:
        remaining = text_length(container)
    chars = remaining + 1 if remaining else 0
    links = sum(text.length(a) for a in container.iter("a"))
    return Selection(container, page_prose, True, chars, max(chars - links, 0))


def _common_ancestor(
    top: etree._Element,
    top_score: float,
    adjusted: dict[etree._Element, float],
    body: etree._Element,
) -> etree._Element:
    """When three or more near-best blocks share an ancestor with the best, take it instead:
    an article split into cards or sections scores each part, not the whole."""
    alternatives = [
        el for el, score in adjusted.items()
        if el is not top and top_score and score / top_score >= 0.75
    ]
    if len(alternatives) < 3:
        return top
    alternative_ancestors = [set(el.iterancestors()) | {el} for el in alternatives]
    parent = top.getparent()
    while parent is not None and parent is not body and parent.tag != "html":
        if sum(1 for ancestors in alternative_ancestors if parent in ancestors) >= 3:
            return parent
        parent = parent.getparent()
    return top


def drop_menus(body: etree._Element, deadline: float | None = None) -> None:
    """Remove the menus of a page read whole: lists and runs of five or more links of a few
    words each, with next to no other text (categories, tag clouds, site maps)."""
    text = SubtreeText(body, deadline)
    doomed = []
    walk = etree.iterwalk(body, events=("start",))
    for count, (_, el) in enumerate(walk):
        check_every(deadline, count)
        tag = el.tag
        if tag in ("ul", "ol"):
            links = sum(1 for _ in el.iter("a"))
        elif tag in ("div", "p", "section", "span", "td"):
            links = sum(1 for child in el if child.tag == "a")
        else:
            continue
        if links < MENU_MIN_LINKS:
            continue
        length = text.length(el)
        link_chars = text.link_length(el, deadline)
        if link_chars >= MENU_LINK_SHARE * length and link_chars < MENU_LINK_CHARS * links:
            doomed.append(el)
            walk.skip_subtree()
    for el in doomed:
        remove(el)


def _widen(
    top: etree._Element, body: etree._Element, text: SubtreeText, deadline: float | None
) -> etree._Element:
    """Move up from the best block while it holds only a part of the page's prose and the
    text its ancestor adds is prose too (not links): pages made of several sections (a
    service page, a product's description, size guide and reviews) score each section
    apart, and the best of them is only one (forums: one post)."""
    def prose(el: etree._Element) -> float:
        return text.length(el) - text.link_length(el, deadline)

    page = prose(body)
    if page <= 0:
        return top
    current = prose(top)
    parent = top.getparent()
    while (
        parent is not None and parent is not body and parent.tag != "html"
        and current < WIDEN_SHARE * page
    ):
        added_total = text.length(parent) - text.length(top)
        added = prose(parent) - current
        if added_total > 0 and added / added_total < WIDEN_MIN_PROSE:
            break
        top, current = parent, prose(parent)
        parent = top.getparent()
    return top


def _climb(
    top: etree._Element,
    top_score: float,
    scores: dict[etree._Element, float],
    adjusted: dict[etree._Element, float],
    text: SubtreeText,
    deadline: float | None,
) -> etree._Element:
    """Move up from the best block while its ancestors score as well (split articles)."""
    # an only child is as good as its parent
    parent = top.getparent()
    while parent is not None and parent.tag not in ("body", "html") and len(parent) == 1:
        top = parent
        parent = top.getparent()
    last = top_score
    threshold = last / 3
    parent = top.getparent()
    while parent is not None and parent.tag not in ("body", "html"):
        if parent not in scores:
            parent = parent.getparent()
            continue
        score = adjusted.get(parent)
        if score is None:
            score = scores[parent] * (1 - _link_density(parent, text, deadline))
        if score < threshold:
            break
        if score > last:
            return parent
        last = score
        parent = parent.getparent()
    return top


def _prepare(
    container: etree._Element,
    attempt: Attempt,
    scores: dict[etree._Element, float],
    title: str | None,
    measured: SubtreeText,
    deadline: float | None,
) -> list[etree._Element]:
    """Readability's prepArticle: remove what is left of the furniture inside the content;
    returns what it removed.

    `measured` is the page's text as selection measured it: each block is judged with what
    was inside it then (removing inner furniture first and measuring again, as Readability
    does, costs a walk per block)."""
    title_key = squash(title).lower() if title else None
    removed: list[etree._Element] = []
    for heading in list(container.iter("h1", "h2")):
        text = squash(text_of(heading)).lower()
        negative = attempt.weigh_classes and class_weight(heading) < 0
        # the page's own title repeated above the article: already in Document.title
        repeats_title = bool(title_key and text and (text in title_key or title_key in text))
        if negative or repeats_title:
            remove(heading)
            removed.append(heading)
    if not attempt.clean_conditionally:
        return removed
    for count, el in enumerate(reversed(list(container.iter(*_CLEANED_TAGS)))):
        check_every(deadline, count)
        if el.getparent() is None or el is container:
            continue
        if _should_clean(el, attempt, scores, measured, deadline):
            remove(el)
            removed.append(el)
    return removed


def _should_clean(
    el: etree._Element,
    attempt: Attempt,
    scores: dict[etree._Element, float],
    measured: SubtreeText,
    deadline: float | None,
) -> bool:
    weight = class_weight(el) if attempt.weigh_classes else 0
    if weight + scores.get(el, 0) < 0:
        return True
    raw = measured.text(el)
    commas = raw.count(",") if raw.isascii() else len(_COMMAS.findall(raw))
    if commas >= 10:
        return False
    tag = el.tag
    is_list = tag in ("ul", "ol")
    length = measured.length(el)
    # the element counts in one XPath evaluation, in libxml2: walking the subtree in Python
    # for each of them costs more than the rest of the judgement
    paragraphs, images, items, inputs, lists, figures, code = map(
        int, str(_CLEAN_COUNTS(el)).split()
    )
    items -= 100
    if not is_list and length and lists:
        list_chars = sum(measured.length(li) for li in el.iter("ul", "ol"))
        is_list = list_chars / length > 0.9
    in_figure = figures > 0
    density = measured.link_length(el, deadline) / length if length else 0.0
    if tag != "table" and code and density < 0.5:
        return False
    remove_it = (
        (images > 1 and paragraphs / images < 0.5 and not in_figure)
        or (not is_list and items > paragraphs)
        or (inputs > paragraphs // 3)
        or (
            not is_list
            and length < MIN_PARAGRAPH_CHARS
            and (images == 0 or images > 2)
            and not in_figure
            and _heading_density(el, length, measured) < 0.9
        )
        or (not is_list and weight < 25 and density > 0.2)
        or (weight >= 25 and density > 0.5)
        or (is_list and density > 0.6)  # a list of links: related stories, tags, "read more"
    )
    if not remove_it or not is_list or not images:
        return remove_it
    # a list of images is content (a gallery)
    return not all(len(li) == 1 and li[0].tag == "img" for li in el.iter("li"))


def _heading_density(el: etree._Element, length: int, measured: SubtreeText) -> float:
    headings = sum(measured.length(h) for h in el.iter("h1", "h2", "h3", "h4", "h5", "h6"))
    return headings / length if length else 0.0


# paragraphs, images, list items, inputs, lists, figures around, code inside (0 or 1)
_CLEAN_COUNTS = etree.XPath(
    "concat(count(descendant::p), ' ', count(descendant::img), ' ', count(descendant::li), ' ',"
    " count(descendant::input), ' ', count(descendant::ul | descendant::ol), ' ',"
    " count(ancestor-or-self::figure), ' ', count((descendant::pre | descendant::code)[1]))"
)
