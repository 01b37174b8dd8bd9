"""Passages: cut on headings and blank lines, ranked by BM25, spans exact in code points."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.search.passages import (
    MAX_CHARS,
    MIN_CHARS,
    query_terms,
    rank_passages,
    split_passages,
)

DOC = (
    "# Guide\n\nIntro about asyncio.\n\n## Timeouts\nUse asyncio.timeout() for deadlines.\n\n"
    "A second paragraph on timeouts.\n\n## Cats\n\nNothing about the topic here at all."
)


def spans(text: str) -> list[str]:
    return [text[p.start : p.end] for p in split_passages(text)]


def test_headings_start_passages_and_are_kept_apart() -> None:
    passages = split_passages(DOC)
    assert [(DOC[p.start : p.end], p.heading) for p in passages] == [
        ("Intro about asyncio.", "Guide"),
        ("Use asyncio.timeout() for deadlines.\n\nA second paragraph on timeouts.", "Timeouts"),
        ("Nothing about the topic here at all.", "Cats"),
    ]


def test_long_paragraphs_are_cut_at_sentence_ends() -> None:
    text = "This sentence is about twenty-nine words. " * 80
    pieces = spans(text)
    assert len(pieces) > 1
    assert all(MIN_CHARS <= len(p) <= MAX_CHARS for p in pieces[:-1])
    assert all(p.endswith(".") for p in pieces)


def test_short_paragraphs_are_joined_up_to_the_minimum() -> None:
    text = "\n\n".join(f"Line {n} of a list." for n in range(60))
    pieces = spans(text)
    assert all(len(p) >= MIN_CHARS for p in pieces[:-1])
    assert "".join(pieces).replace("\n", "") == text.replace("\n", "")


def test_query_terms_words_and_cjk_pairs() -> None:
    assert query_terms("How does the asyncio Timeout work?") == ["asyncio", "timeout", "work"]
    assert query_terms("大模型 2026") == ["2026", "大模", "模型"]
    assert query_terms("the of") == ["the", "of"]  # only stop words: keep them


def test_ranking_prefers_the_matching_passage_and_skips_the_rest() -> None:
    ranked = rank_passages("asyncio timeouts", [DOC], 5)
    texts = [DOC[r.passage.start : r.passage.end] for r in ranked]
    assert texts[0].startswith("Use asyncio.timeout()")
    assert all("Nothing about" not in t for t in texts)  # no query term: never returned
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)


def test_ranking_across_pages_keeps_the_page_index_and_the_limit() -> None:
    pages = ["Cats and dogs.", "", "Deadlines bound retries: the deadline wins."]
    ranked = rank_passages("deadline", pages, 1)
    assert len(ranked) == 1 and ranked[0].passage.page == 2


def test_words_match_whole_and_case_insensitively_cjk_inside_text() -> None:
    pages = ["Timeoutsandmore TIMEOUT here", "关于截止时间的说明"]
    ranked = rank_passages("timeout 截止", pages, 5)
    assert {r.passage.page for r in ranked} == {0, 1}


def test_no_terms_or_no_limit_gives_nothing() -> None:
    assert rank_passages("!!!", [DOC], 5) == []
    assert rank_passages("asyncio", [DOC], 0) == []


_TEXT = st.lists(
    st.sampled_from([*"ab cd.\n#😀超时İß", "## h\n", "\n\n", "word " * 40]), max_size=400
).map("".join)


@settings(max_examples=150, deadline=None)
@given(_TEXT)
def test_passages_are_ordered_disjoint_spans_of_the_text(text: str) -> None:
    passages = split_passages(text)
    previous_end = 0
    for passage in passages:
        assert previous_end <= passage.start < passage.end <= len(text)
        piece = text[passage.start : passage.end]
        assert piece == piece.strip() and piece
        previous_end = passage.end
    for ranked in rank_passages("ab 超时 i̇", [text], 20):
        assert ranked.passage in passages
