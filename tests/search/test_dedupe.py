"""Near-duplicates: the same title on one site, or title and snippet on two (a mirror)."""

from __future__ import annotations

from gateway.search.canonical import SearchResult, result_id
from gateway.search.dedupe import MAX_ALSO_AT, merge_near_duplicates

SNIPPET = "A long enough snippet to identify one page across mirrors."


def result(url: str, title: str, snippet: str = "") -> SearchResult:
    host = url.split("/")[2]
    return SearchResult(result_id(url), title, url, snippet, host, None)


def test_same_title_on_one_site_merges_keeping_the_other_url() -> None:
    kept, merged = merge_near_duplicates(
        [
            result("https://docs.example.org/a", "Timeouts in asyncio"),
            result("https://other.example.net/x", "Something else entirely"),
            result("https://www.docs.example.org/b?print=1", "Timeouts  in AsyncIO"),
        ]
    )
    assert merged == 1
    assert [r.url for r in kept] == ["https://docs.example.org/a", "https://other.example.net/x"]
    assert kept[0].also_at == ("https://www.docs.example.org/b?print=1",)


def test_mirrors_need_title_and_snippet_alike() -> None:
    kept, merged = merge_near_duplicates(
        [
            result("https://a.example.org/p", "The asyncio guide, part one", SNIPPET),
            result("https://mirror.example.net/p", "The asyncio guide — part one", SNIPPET),
            result("https://b.example.org/p", "The asyncio guide, part one", "Another text here."),
        ]
    )
    assert merged == 1 and len(kept) == 2
    assert kept[0].also_at == ("https://mirror.example.net/p",)


def test_short_titles_never_merge() -> None:
    kept, merged = merge_near_duplicates(
        [result("https://a.example.org/1", "Home"), result("https://a.example.org/2", "Home")]
    )
    assert merged == 0 and len(kept) == 2


def test_mirrors_are_capped_and_carried_over() -> None:
    copies = [result(f"https://a.example.org/{n}", "Exactly the same title") for n in range(9)]
    kept, merged = merge_near_duplicates(copies)
    assert merged == 8 and len(kept) == 1 and len(kept[0].also_at) == MAX_ALSO_AT
