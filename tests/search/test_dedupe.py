"""Near-duplicates: close titles on one registrable domain, or close titles and snippets on
two hosts (a mirror, a syndicated copy); and what must never merge."""

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
            result("https://b.example.com/p", "The asyncio guide, part one", "Another text here."),
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


STORY = (
    "The Federal Reserve held its benchmark rate steady on Wednesday and signalled that two "
    "cuts remain likely before the end of the year, citing cooling inflation."
)


def test_syndicated_copies_merge_across_hosts() -> None:
    kept, merged = merge_near_duplicates(
        [
            result("https://apnews.com/article/fed-rates-1", "Fed holds rates steady, signals two "
                   "cuts this year | AP News", STORY),
            result("https://www.seattletimes.com/business/fed-holds", "Fed holds rates steady, "
                   "signals two cuts this year - The Seattle Times", STORY[:90]),
            result("https://news.example.net/fed", "Fed holds rates steady, signals two cuts "
                   "this year", "Markets rallied after the decision; analysts expect more."),
        ]
    )  # fmt: skip
    assert merged == 1 and len(kept) == 2  # the third has another snippet: another page
    assert kept[0].also_at == ("https://www.seattletimes.com/business/fed-holds",)


def test_close_titles_on_one_registrable_domain_merge() -> None:
    kept, merged = merge_near_duplicates(
        [
            result("https://docs.python.org/3/library/asyncio-task.html",
                   "Coroutines and Tasks: asyncio timeouts explained"),
            result("https://www.python.org/asyncio-task",
                   "asyncio timeouts explained - Coroutines and Tasks"),
        ]
    )  # fmt: skip
    assert merged == 1 and len(kept) == 1


def test_distinct_but_similar_results_stay_apart() -> None:
    kept, merged = merge_near_duplicates(
        [
            # one version apart: different pages
            result("https://docs.python.org/3.12/whatsnew", "What's New In Python 3.12"),
            result("https://docs.python.org/3.13/whatsnew", "What's New In Python 3.13"),
            # a private suffix keeps two users' sites apart
            result("https://alice.github.io/notes", "Notes on asyncio timeouts"),
            result("https://bob.github.io/notes", "Notes on asyncio timeouts"),
            # one month apart on two hosts, with their own snippets
            result("https://a.example.com/jan", "Release notes 2026 | January",
                   "Bug fixes for the scheduler, the cache and the command line tools in all."),
            result("https://b.example.net/feb", "Release notes 2026 | February",
                   "New scheduler options, a faster cache and a new command line flag for all."),
        ]
    )  # fmt: skip
    assert merged == 0 and len(kept) == 6


def test_chinese_syndicated_copies_merge() -> None:
    snippet = "国家统计局今天发布数据，前三季度国内生产总值同比增长百分之五，经济运行总体平稳。"
    kept, merged = merge_near_duplicates(
        [
            result("https://finance.sina.com.cn/a.html", "前三季度国内生产总值同比增长5%_新浪财经",
                   snippet),
            result("https://www.163.com/money/b.html", "前三季度国内生产总值同比增长5%|网易",
                   snippet[:30]),
            result("https://finance.sina.com.cn/c.html", "前三季度居民收入同比增长5%_新浪财经",
                   "国家统计局发布居民收入数据，人均可支配收入实际增长。"),
        ]
    )  # fmt: skip
    assert merged == 1 and [r.url for r in kept] == [
        "https://finance.sina.com.cn/a.html",
        "https://finance.sina.com.cn/c.html",
    ]
