"""Research's page choice (round-robin over sites) and its text for models."""

from __future__ import annotations

import pytest

from gateway.search.canonical import SearchResult, result_id
from gateway.tools.research import pick_pages, render_text, research_note
from gateway.tools.websearch import Ranked


def ranked(*hosts: str) -> list[Ranked]:
    out = []
    for rank, host in enumerate(hosts, start=1):
        url = f"https://{host}/{rank}"
        out.append(Ranked(rank, SearchResult(result_id(url), "t", url, "s", host, None)))
    return out


@pytest.mark.parametrize(
    ("hosts", "count", "ranks"),
    [
        pytest.param(("a", "a", "b", "c"), 2, [1, 3], id="distinct-sites-first"),
        pytest.param(("a", "a", "b", "c"), 3, [1, 3, 4], id="every-site-once"),
        pytest.param(("a", "a", "b", "c"), 4, [1, 2, 3, 4], id="then-second-pages"),
        pytest.param(("a", "a", "a", "b"), 3, [1, 2, 4], id="second-round-by-site-order"),
        pytest.param(("a", "www.a", "b"), 2, [1, 3], id="www-is-the-same-site"),
        pytest.param(("a", "b"), 5, [1, 2], id="fewer-than-asked"),
        pytest.param(("a", "b"), 0, [], id="none-asked"),
        pytest.param((), 3, [], id="nothing-allowed"),
    ],
)
def test_pick_pages(hosts, count, ranks) -> None:
    assert [r.rank for r in pick_pages(ranked(*hosts), count)] == ranks


def test_render_text_shows_search_then_pages_and_errors() -> None:
    nonce = "b" * 32
    search = {
        "envelope": {"id": "s1", "marker": nonce, "policy": {"name": "p", "rule": "r"}},
        "provider": "brave",
        "results": [],
        "filtered": {"policy": 0, "domains": 0},
        "warnings": [],
    }
    page = {
        "rank": 1,
        "envelope": {
            "id": "p1",
            "final_url": "https://a/1",
            "status": 200,
            "content_type": "text/html",
            "body_bytes": 10,
            "body_sha256": "c" * 64,
            "chars": 5,
            "total_chars": 5,
            "start_index": 0,
            "truncated": False,
            "policy": {"name": "p", "rule": "domains.allow[0]"},
            "marker": "d" * 32,
        },
        "title": None,
        "content": "<<<wrapped page>>>",
    }
    failed = {
        "url": "https://b/2",
        "rank": 2,
        "error": {"code": "policy_denied", "message": "private", "reason": "private_address"},
    }
    text = render_text({"search": search, "pages": [page, failed]})
    assert text.index("tool=WebSearch") < text.index("[page 1]") < text.index("tool=WebFetch")
    assert "<<<wrapped page>>>" in text
    assert "[page 2: https://b/2 not read: policy_denied (private_address): private]" in text


def test_render_text_leads_with_passages_and_names_the_pages() -> None:
    search = {
        "envelope": {"id": "s1", "marker": "b" * 32, "policy": {"name": "p", "rule": "r"}},
        "provider": "brave",
        "results": [],
        "filtered": {"policy": 0, "domains": 0},
        "warnings": [],
    }
    page = {
        "rank": 1,
        "envelope": {"id": "p1", "final_url": "https://a/1", "status": 200, "total_chars": 99},
        "content": "<<<whole page>>>",
    }
    passage = {
        "text": "<<<wrapped passage>>>", "url": "https://a/1", "title": None,
        "heading": "<<<wrapped heading>>>", "rank": 1, "score": 2.5, "page_index": 0,
        "char_start": 10, "char_end": 40,
    }  # fmt: skip
    body = {
        "search": search,
        "pages": [page],
        "passages": [passage],
        "envelope": {"id": "r1", "marker": "e" * 32},
    }
    text = render_text(body)
    assert "[passage 1: page 0 https://a/1 chars 10-40 score 2.5]" in text
    assert "<<<wrapped passage>>>" in text and "heading: <<<wrapped heading>>>" in text
    assert "<<<whole page>>>" not in text  # the pages are named, not repeated
    assert "[page 0 (result 1): https://a/1 envelope=p1" in text
    assert text.index("[passage 1") < text.index("[page 0")
    assert "No passage" in render_text({**body, "passages": []})


def test_the_note_says_what_was_read_and_why_not() -> None:
    read = {"envelope": {"final_url": "https://a.example/x"}, "rank": 1}
    failed = {"url": "https://b.example/y", "rank": 2,
              "error": {"code": "upstream_timeout", "message": "slow", "reason": None}}  # fmt: skip
    assert research_note([read, failed], 5, 2) == (
        "Read 1 of 2 chosen pages: https://a.example/x (result 1). "
        "Not read: https://b.example/y (result 2): upstream_timeout."
    )
    assert research_note([read], 1, 3) == (
        "Read 1 of 1 chosen pages: https://a.example/x (result 1). "
        "Only 1 allowed result to choose from."
    )
    assert research_note([], 0, 2) == "No page read: the search found no result the policy allows."
    assert research_note([], 4, 0) == "No page read: fetch_top_n is 0."
