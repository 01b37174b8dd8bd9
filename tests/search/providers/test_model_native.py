"""The shared part of the model-native providers: the prompt and the citations' results."""

from __future__ import annotations

from gateway.search.providers.model_native import (
    MAX_ANSWER_CHARS,
    capped_answer,
    cited_results,
    prompt,
)
from gateway.search.query import SearchQuery


def test_prompt_carries_the_query_and_the_filters_no_api_has() -> None:
    text = prompt(
        SearchQuery.from_fields(
            {"query": "rust 2024 edition", "time_range": "2025-01-01..2025-02-28",
             "exclude_domains": ["spam.example", "ads.example"]}
        )
    )  # fmt: skip
    assert "Query: rust 2024 edition" in text
    assert "from 2025-01-01 to 2025-02-28" in text
    assert "Do not use pages from: spam.example, ads.example." in text
    assert "Prefer primary sources" in text
    assert "the last month" in prompt(SearchQuery("q", freshness="month"))


def test_citations_each_url_once_filling_in_what_was_missing() -> None:
    results = cited_results(
        [
            {"url": "https://a.example/", "title": "", "snippet": "first"},
            {"url": "https://b.example/", "title": "B", "snippet": "b"},
            {"url": "https://a.example/", "title": "A", "snippet": "again"},
            {"url": 42},
            {"url": "javascript:alert(1)", "title": "no"},
        ],
        [{"url": "https://unused.example/"}],
    )
    assert [(r.url, r.title, r.snippet) for r in results] == [
        ("https://a.example/", "A", "first"),
        ("https://b.example/", "B", "b"),
    ]


def test_sources_stand_in_when_nothing_was_cited() -> None:
    results = cited_results([], [{"url": "https://s.example/x", "published": "May 26, 2025"}])
    assert [(r.url, r.title, r.published_at) for r in results] == [
        ("https://s.example/x", "https://s.example/x", "2025-05-26")
    ]


def test_answer_is_joined_trimmed_capped_or_none() -> None:
    assert capped_answer(["  Hello", " world. "]) == "Hello world."
    assert capped_answer(["", "  "]) is None
    assert len(capped_answer(["x" * (MAX_ANSWER_CHARS + 10)]) or "") == MAX_ANSWER_CHARS
