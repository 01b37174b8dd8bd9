"""HTML bytes -> an lxml tree, its title and description; and the text measures the others use.

libxml2 parses with recovery on, `huge_tree` off (it caps nesting at 255 levels and rejects
giant text nodes), no network, no comments or processing instructions. A new parser per call:
lxml parsers must not be shared between threads.
"""

from __future__ import annotations

import itertools
import re
import time

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
        collect_ids=False,  # nothing looks elements up by id: the table costs ~3% of a parse
    )
    try:
        root = etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError):
        return None
    return root


def squash(text: str) -> str:
    """Whitespace runs (newlines, NBSP) as single spaces, stripped: `" ".join(text.split())`.

    Splitting makes an object of every word; a text whose only whitespace is single spaces
    (a paragraph whose pieces were squashed already; `isprintable` is false for every other
    whitespace character) needs only its ends stripped. (Page-sized texts rarely are: the
    checks would cost more than they save there, so lengths are still counted by splitting.)"""
    if "  " not in text and text.isprintable():
        return text.strip(" ")
    return " ".join(text.split())


def text_length(el: etree._Element) -> int:
    """Characters of an element's text once whitespace runs count as one."""
    words = "".join(el.itertext()).split()
    return sum(map(len, words)) + len(words) - 1 if words else 0


def link_length(el: etree._Element) -> int:
    """Characters of the text of the links in an element (outermost links only)."""
    total = 0
    walk = etree.iterwalk(el, events=("start",), tag="a")
    for _, a in walk:
        total += text_length(a)
        walk.skip_subtree()
    return total


def text_of(el: etree._Element) -> str:
    return "".join(el.itertext())


class DeadlineExceeded(Exception):
    """Extraction ran past the caller's deadline."""


def check_every(deadline: float | None, count: int) -> None:
    """Every 1024th count, raise DeadlineExceeded once `deadline` (time.monotonic()) passed."""
    if deadline is not None and count % 1024 == 0 and time.monotonic() > deadline:
        raise DeadlineExceeded


class SubtreeText:
    """`text_length`, text and link text of every element under a root, from one walk.

    An element's text (its itertext joined) is a run of consecutive pieces (texts and tails)
    of a document-order walk, so prefix sums over the pieces give any element's length in
    constant time, where joining and splitting each subtree again costs its size per question.
    Valid only while the tree is unchanged; one per call, never shared.
    """

    __slots__ = ("_spans", "_pieces", "_chars", "_words", "_joins", "_links", "_link_sums")

    def __init__(self, root: etree._Element, deadline: float | None = None) -> None:
        pieces: list[str] = []
        # per element: the half-open ranges of the non-empty pieces its text is made of and
        # of the links (<a>, in document order) inside it, itself included
        spans: dict[etree._Element, tuple[int, int, int, int]] = {}
        starts: list[tuple[int, int]] = []
        links: list[etree._Element] = []
        append = pieces.append
        push, pop = starts.append, starts.pop
        for event, node in etree.iterwalk(root, events=_WALK_EVENTS):
            if event == "start":
                push((len(pieces), len(links)))
                if node.tag == "a":
                    links.append(node)
                text = node.text
                if text:
                    append(text)
                continue
            if event == "end":
                first_piece, first_link = pop()
                spans[node] = (first_piece, len(pieces), first_link, len(links))
                if len(spans) & 1023 == 0:
                    check_every(deadline, 0)
            # comments' and PIs' tails are their parent's text; the root's tail is not its own
            if node is not root:
                tail = node.tail
                if tail:
                    append(tail)
        # per piece: non-space characters, words, and whether it starts or ends with a space
        # (where two pieces meet with no space, their edge words are one word)
        chars = [0]
        words = [0]
        joins = [0]
        ends_in_word = False
        for piece in pieces:
            if piece.isspace():
                ends_in_word = False
                chars.append(chars[-1])
                words.append(words[-1])
                joins.append(joins[-1])
                continue
            starts_with_space = piece[0].isspace()
            if piece.isprintable() and "  " not in piece:
                # the common case, counted without splitting: the only printable whitespace
                # is U+0020, and no two of them are adjacent
                spaces = piece.count(" ")
                chars.append(chars[-1] + len(piece) - spaces)
                words.append(words[-1] + spaces + 1 - starts_with_space - (piece[-1] == " "))
            else:
                split = piece.split()
                chars.append(chars[-1] + sum(map(len, split)))
                words.append(words[-1] + len(split))
            joins.append(joins[-1] + (ends_in_word and not starts_with_space))
            ends_in_word = not piece[-1].isspace()
        self._chars, self._words, self._joins = chars, words, joins
        self._spans = spans
        self._pieces = pieces
        self._links = links
        # prefix sums of the links' weighted lengths, made on the first question about links
        self._link_sums: list[float] | None = None

    def _length(self, first: int, end: int) -> int:
        if end <= first:
            return 0
        # the join of the run's first piece is with the piece before the run
        words = self._words[end] - self._words[first] - (self._joins[end] - self._joins[first + 1])
        if words <= 0:
            return 0
        return self._chars[end] - self._chars[first] + words - 1

    def length(self, el: etree._Element) -> int:
        """`text_length(el)`."""
        span = self._spans.get(el)
        return text_length(el) if span is None else self._length(span[0], span[1])

    def remaining_length(
        self, kept: list[etree._Element], removed: list[etree._Element]
    ) -> int | None:
        """`text_length` of the kept elements' texts in a row once the removed elements
        (inside them, in any order, nested or not) are gone: the same arithmetic over what
        is left of their runs of pieces, where a word can now run on across a gap. None when
        an element was not measured."""
        spans = self._spans
        try:
            kept_runs = sorted(spans[el][:2] for el in kept)
            gaps = sorted(spans[el][:2] for el in removed)
        except KeyError:
            return None
        runs: list[tuple[int, int]] = []
        gap_index = 0
        for first, end in kept_runs:
            start = first
            while gap_index < len(gaps) and gaps[gap_index][0] < end:
                gap_first, gap_end = gaps[gap_index]
                if gap_end > start:
                    if gap_first > start:
                        runs.append((start, gap_first))
                    start = gap_end
                gap_index += 1
            if end > start:
                runs.append((start, end))
        pieces, chars, words, joins = self._pieces, self._chars, self._words, self._joins
        total_chars = total_words = 0
        last_piece: str | None = None
        for first, end in runs:
            total_chars += chars[end] - chars[first]
            # words of the run, less where its pieces run on into each other (the join of its
            # first piece is with the piece before the run, counted here instead)
            total_words += words[end] - words[first] - (joins[end] - joins[first + 1])
            piece = pieces[first]
            if last_piece is not None and not last_piece[-1].isspace() and not piece[0].isspace():
                total_words -= 1
            last_piece = pieces[end - 1]
        if total_words <= 0:
            return 0
        return total_chars + total_words - 1

    def text(self, el: etree._Element) -> str:
        """`text_of(el)`."""
        span = self._spans.get(el)
        return text_of(el) if span is None else "".join(self._pieces[span[0] : span[1]])

    def link_length(self, el: etree._Element, deadline: float | None = None) -> float:
        """The text of the links in `el` (itself included); fragment links (`#...`) at 0.3."""
        sums = self._link_sums
        if sums is None:
            sums = self._link_sums = [0.0]
            for count, a in enumerate(self._links):
                check_every(deadline, count + 1)
                sums.append(sums[-1] + self._weighted(a))
        span = self._spans.get(el)
        if span is not None:
            return sums[span[3]] - sums[span[2]]
        total = 0.0
        for count, a in enumerate(el.iter("a")):
            check_every(deadline, count + 1)
            total += self._weighted(a)
        return total

    def _weighted(self, a: etree._Element) -> float:
        href = a.get("href") or ""
        return self.length(a) * (0.3 if href.startswith("#") else 1.0)


_WALK_EVENTS = ("start", "end", "comment", "pi")


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


MAX_HEADING_CHARS = 300
_HEADING_PLACES = frozenset({"nav", "footer", "aside", "menu", "dialog", "template", "noscript"})
_LOGO = re.compile(r"logo|brand|site-?title|site-?name|masthead")
_WORD = re.compile(r"\w+")


def main_heading(root: etree._Element, title: str | None) -> str | None:
    """The page's main heading: of its `<h1>`s (not in navigation, footers or sidebars, not
    a logo: a link home or a `logo`/`brand` class), the one whose words are most like the
    title's, the first on a tie; without one, an `<h2>` that repeats the title."""
    candidates: list[str] = []
    for count, el in enumerate(root.iter("h1")):
        if count >= 20:
            break
        text = squash(text_of(el))
        if not text or len(text) > MAX_HEADING_CHARS or text in candidates or _is_logo(el):
            continue
        if any(ancestor.tag in _HEADING_PLACES for ancestor in el.iterancestors()):
            continue
        candidates.append(text)
    title_words = set(_WORD.findall(title.lower())) if title else set()
    if not candidates:
        if not title_words:
            return None
        for count, el in enumerate(root.iter("h2")):
            if count >= 20:
                break
            text = squash(text_of(el))
            if text and len(text) <= MAX_HEADING_CHARS and _likeness(text, title_words) >= 0.5:
                return text
        return None
    if len(candidates) == 1 or not title_words:
        return candidates[0]
    return max(candidates, key=lambda text: _likeness(text, title_words))


def _likeness(text: str, title_words: set[str]) -> float:
    """Jaccard similarity of a heading's words and the title's."""
    words = set(_WORD.findall(text.lower()))
    union = len(words | title_words)
    return len(words & title_words) / union if union else 0.0


def _is_logo(heading: etree._Element) -> bool:
    for el in itertools.chain((heading,), heading.iterdescendants()):
        label = ((el.get("class") or "") + " " + (el.get("id") or ""))[:300].lower()
        if _LOGO.search(label):
            return True
    links = list(heading.iter("a"))
    return len(links) == 1 and (links[0].get("href") or "").strip() in ("/", "./", "index.html")


def declares_article(root: etree._Element) -> bool:
    """Whether the page says it is an article (its OpenGraph `og:type`). Measured: schema.org
    types in JSON-LD say so on too many listing pages to help."""
    return (_meta_content(root, "og:type") or "").lower().startswith("article")


def page_description(root: etree._Element) -> str | None:
    description = _meta_content(root, "description", "og:description", "twitter:description")
    return description[:MAX_DESCRIPTION_CHARS] if description else None
