"""Pages cut into passages and ranked against a query with BM25, in process. Pure.

A page's text (Markdown, as the extractor writes it) is cut on its headings and blank
lines: paragraphs under one heading are joined until a passage reaches `MIN_CHARS`, never
past `MAX_CHARS`, and a longer paragraph is cut at a sentence end (else a space). A
passage is a span of the page's text: `text[start:end]` is exactly the passage, offsets in
code points; the heading it sits under is kept apart (and counts for ranking too).

Ranking is Okapi BM25 (k1 = 1.2, b = 0.75) over every passage of every page, with the
passage length in characters. Query terms are words (letters and digits, case-insensitive,
a few English stop words left out) and, for Chinese, Japanese and Korean text, which has no
spaces, every two-character run. A word counts where a word of the text starts with it
("timeout" counts "timeouts" too: a light stemming); a two-character run counts anywhere.
Counting is `str.count` over a lower-cased copy of each passage with punctuation turned into
spaces (same length, so the offsets hold), which keeps ranking a small fraction of what
extracting the pages costs.
"""

from __future__ import annotations

import heapq
import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add

MIN_CHARS = 300
MAX_CHARS = 1200
K1 = 1.2
B = 0.75
MAX_TERMS = 32

_BLOCK_GAP = re.compile(r"\n[ \t]*\n\s*")
_HEADING = re.compile(r"#{1,6}[ \t]+(.*?)[ \t#]*")
_SENTENCE_END = re.compile(r"(?:[.!?][\"')\]]?\s|[。！？；]\s*|\n)")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(f"[^\\W_{_CJK}]+")
# Everything that separates words becomes a space (one character for one: offsets hold).
_SEPARATORS = str.maketrans(
    dict.fromkeys(
        string.punctuation + string.whitespace + "“”‘’«»—–…·、。，：；！？（）【】《》「」", " "
    )
)
_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "does",
        "do",
        "did",
        "can",
    ]
)


@dataclass(frozen=True, slots=True)
class Passage:
    page: int  # index of the page among those given
    start: int  # code points into the page's text
    end: int
    heading: str | None  # the heading the passage sits under, without its '#' marks
    heading_at: int = -1  # where that heading's text starts in the page's text


@dataclass(frozen=True, slots=True)
class Ranked:
    passage: Passage
    score: float


def split_passages(text: str, page: int = 0) -> list[Passage]:
    """The page's passages in reading order; headings start new ones and are not part of
    any passage's span."""
    passages: list[Passage] = []
    heading: str | None = None
    heading_at = -1
    open_start = open_end = -1

    def close() -> None:
        nonlocal open_start, open_end
        if open_start >= 0:
            passages.append(Passage(page, open_start, open_end, heading, heading_at))
        open_start = open_end = -1

    for start, end in _blocks(text):
        if text.startswith("#", start):
            line_end = text.find("\n", start, end)
            line_end = end if line_end < 0 else line_end
            match = _HEADING.fullmatch(text, start, line_end)
            if match is not None:
                close()
                raw = match.group(1)
                heading = raw.strip() or None
                heading_at = match.start(1) + len(raw) - len(raw.lstrip())
                start = line_end
                while start < end and text[start].isspace():
                    start += 1
                if start >= end:
                    continue
        pieces = ((start, end),) if end - start <= MAX_CHARS else _pieces(text, start, end)
        for piece_start, piece_end in pieces:
            if open_start >= 0 and piece_end - open_start > MAX_CHARS:
                close()
            if open_start < 0:
                open_start = piece_start
            open_end = piece_end
            if open_end - open_start >= MIN_CHARS:
                close()
    close()
    return passages


def query_terms(query: str) -> list[str]:
    """The terms a query is ranked by, first seen first, at most MAX_TERMS."""
    terms: dict[str, None] = {}
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in _STOP_WORDS] or words
    for word in kept:
        terms.setdefault(word)
    for run in _CJK_RUN.findall(query):
        if len(run) == 1:
            terms.setdefault(run)
        for i in range(len(run) - 1):
            terms.setdefault(run[i : i + 2])
    return list(terms)[:MAX_TERMS]


def rank_passages(query: str, texts: Sequence[str], limit: int) -> list[Ranked]:
    """The `limit` best passages of all `texts` for `query`, best first; passages that hold
    no query term are never returned. Ties go to the earlier page, then the earlier span."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    needles = [term if _CJK_RUN.fullmatch(term) else " " + term for term in terms]
    passages: list[Passage] = []
    # Per term, its count in each passage (heading included), in the order of `passages`.
    columns: list[list[int]] = [[] for _ in terms]
    for index, text in enumerate(texts):
        found = split_passages(text, index)
        if not found:
            continue
        # One leading space: folded[i] is the character before text[i], so a word that
        # starts a passage (or a heading) is counted.
        folded = " " + _fold(text)
        bodies = [folded[p.start : p.end + 1] for p in found]
        headings = [folded[p.heading_at : p.heading_at + len(p.heading) + 1] if p.heading
                    else "" for p in found]  # fmt: skip
        for column, needle in zip(columns, needles, strict=True):
            if needle not in folded:
                column.extend(repeat(0, len(found)))
                continue
            # map() runs str.count in C for every passage: no interpreter loop per passage.
            column.extend(map(add, map(str.count, bodies, repeat(needle)),
                              map(str.count, headings, repeat(needle))))  # fmt: skip
        passages.extend(found)
    if not passages:
        return []
    total = len(passages)
    average = sum(p.end - p.start for p in passages) / total or 1.0
    norms = [K1 * (1 - B + B * (p.end - p.start) / average) for p in passages]
    scores = [0.0] * total
    for column in columns:
        hits = [i for i, n in enumerate(column) if n]
        if not hits:
            continue
        idf = math.log(1 + (total - len(hits) + 0.5) / (len(hits) + 0.5))
        for i in hits:
            n = column[i]
            scores[i] += idf * n * (K1 + 1) / (n + norms[i])
    best = heapq.nsmallest(limit, (i for i in range(total) if scores[i] > 0),
                           key=lambda i: (-scores[i], i))  # fmt: skip
    return [Ranked(passages[i], scores[i]) for i in best]


def _fold(text: str) -> str:
    """Lower case with separators as spaces, one character for each character of `text`.
    (U+0130, the dotted capital I, is the one character whose lower case is two.)"""
    return text.replace("\u0130", "i").lower().translate(_SEPARATORS)


def _blocks(text: str) -> list[tuple[int, int]]:
    """Spans of the text between blank lines, without their outer whitespace."""
    spans = []
    position = 0
    for gap in _BLOCK_GAP.finditer(text):
        spans.append((position, gap.start()))
        position = gap.end()
    spans.append((position, len(text)))
    out = []
    for start, end in spans:
        block = text[start:end]
        stripped = block.strip()
        if stripped:
            start += len(block) - len(block.lstrip())
            out.append((start, start + len(stripped)))
    return out


def _pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """A block as spans of at most MAX_CHARS, cut after a sentence end, else at a space."""
    pieces = []
    while end - start > MAX_CHARS:
        window = text[start : start + MAX_CHARS]
        cut = 0
        for match in _SENTENCE_END.finditer(window, MIN_CHARS):
            cut = match.end()
        if cut == 0:
            cut = window.rfind(" ", MIN_CHARS) + 1 or MAX_CHARS
        piece_end = start + cut
        trimmed = piece_end
        while trimmed > start and text[trimmed - 1].isspace():
            trimmed -= 1
        pieces.append((start, trimmed))
        start = piece_end
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces
