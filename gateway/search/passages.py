"""Pages cut into passages and ranked against a query with BM25, in process. Pure.

A page's text (Markdown, as the extractor writes it) is cut on its headings and blank
lines: paragraphs under one heading are joined until a passage reaches `MIN_CHARS`, never
past `MAX_CHARS`, and a longer paragraph is cut at a sentence end (else a space). A
passage is a span of the page's text: `text[start:end]` is exactly the passage, offsets in
code points; the heading it sits under is kept apart (and counts for ranking too).

Ranking is Okapi BM25 (k1 = 1.2, b = 0.75) over every passage of every page, with the
passage length in characters. Query terms are words (letters and digits, case-insensitive,
a few English stop words left out) and, for Chinese, Japanese and Korean text, which has no
spaces, every two-character run. Terms are counted with one regular-expression pass over
each page's text, so the cost grows with the text's length, not with the number of terms.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Ranked:
    passage: Passage
    score: float


def split_passages(text: str, page: int = 0) -> list[Passage]:
    """The page's passages in reading order; headings start new ones and are not part of
    any passage's span."""
    passages: list[Passage] = []
    heading: str | None = None
    open_start = open_end = -1

    def close() -> None:
        nonlocal open_start, open_end
        if open_start >= 0:
            passages.append(Passage(page, open_start, open_end, heading))
        open_start = open_end = -1

    for start, end in _blocks(text):
        if text.startswith("#", start):
            line_end = text.find("\n", start, end)
            line_end = end if line_end < 0 else line_end
            match = _HEADING.fullmatch(text, start, line_end)
            if match is not None:
                close()
                heading = match.group(1).strip() or None
                start = line_end
                while start < end and text[start].isspace():
                    start += 1
                if start >= end:
                    continue
        for piece_start, piece_end in _pieces(text, start, end):
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
    matcher = _matcher(terms)
    passages: list[Passage] = []
    counts: list[dict[str, int]] = []
    for index, text in enumerate(texts):
        found = split_passages(text, index)
        tallies: list[dict[str, int]] = [{} for _ in found]
        starts = [p.start for p in found]
        for match in matcher.finditer(text):
            at = bisect.bisect_right(starts, match.start()) - 1
            if at >= 0 and match.start() < found[at].end:
                term = match.group(0).lower()
                tallies[at][term] = tallies[at].get(term, 0) + 1
        for passage, tally in zip(found, tallies, strict=True):
            if passage.heading:
                for match in matcher.finditer(passage.heading):
                    term = match.group(0).lower()
                    tally[term] = tally.get(term, 0) + 1
        passages.extend(found)
        counts.extend(tallies)
    if not passages:
        return []
    total = len(passages)
    average = sum(p.end - p.start for p in passages) / total or 1.0
    frequency: dict[str, int] = {}
    for tally in counts:
        for term in tally:
            frequency[term] = frequency.get(term, 0) + 1
    idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
    scored: list[tuple[float, int, Passage]] = []
    for order, (passage, tally) in enumerate(zip(passages, counts, strict=True)):
        if not tally:
            continue
        norm = K1 * (1 - B + B * (passage.end - passage.start) / average)
        score = sum(idf[t] * n * (K1 + 1) / (n + norm) for t, n in tally.items())
        scored.append((score, order, passage))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [Ranked(passage, score) for score, _, passage in scored[:limit]]


def _matcher(terms: Sequence[str]) -> re.Pattern[str]:
    """One pattern for every term: words whole (not inside a longer word), CJK pairs anywhere.
    Longest first, so a term that starts another never hides it."""
    words = sorted((t for t in terms if not _CJK_RUN.fullmatch(t)), key=len, reverse=True)
    pairs = sorted((t for t in terms if _CJK_RUN.fullmatch(t)), key=len, reverse=True)
    parts = []
    if words:
        inside = f"[^\\W_{_CJK}]"  # a letter or digit of a spaced script
        alternatives = "|".join(map(re.escape, words))
        parts.append(f"(?<!{inside})(?:{alternatives})(?!{inside})")
    if pairs:
        parts.append("(?:" + "|".join(map(re.escape, pairs)) + ")")
    return re.compile("|".join(parts), re.IGNORECASE)


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
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            out.append((start, end))
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
