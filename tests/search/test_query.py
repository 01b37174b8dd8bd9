from __future__ import annotations

from datetime import date

import pytest

from gateway.errors import InvalidRequestError
from gateway.search.query import Freshness, SearchQuery, rewrite_chinese_year


def test_defaults_and_normalisation() -> None:
    q = SearchQuery.from_fields(
        {
            "query": "  aiohttp \n middleware ",
            "region": "CN_zh",
            "freshness": "week",
            "site": "Docs.Example.COM.",
            "include_domains": ["a.org", "*.b.org", "a.org"],
            "exclude_domains": ["例子.测试"],
            "provider": "ignored: the tool's field",
        }
    )
    assert q.query == "aiohttp middleware"
    assert q.max_results == 10
    assert (q.region, q.language, q.country) == ("cn-zh", "zh", "cn")
    assert q.freshness is Freshness.WEEK
    assert q.site == "docs.example.com"
    assert q.include_domains == ("a.org", "b.org")
    assert q.exclude_domains == ("xn--fsqu00a.xn--0zwm56d",)


def test_time_range_parses_and_wins_in_has_time_filter() -> None:
    q = SearchQuery.from_fields({"query": "x", "time_range": "2025-01-01..2025-03-31"})
    assert q.time_range == (date(2025, 1, 1), date(2025, 3, 31))
    assert q.has_time_filter


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({}, "query", id="query-missing"),
        pytest.param({"query": "   "}, "query", id="query-blank"),
        pytest.param({"query": 5}, "query", id="query-not-string"),
        pytest.param({"query": "a\x00b"}, "query", id="query-control-char"),
        pytest.param({"query": "x" * 401}, "query", id="query-too-long"),
        pytest.param({"query": "x", "max_results": 0}, "max_results", id="max-results-0"),
        pytest.param({"query": "x", "max_results": 21}, "max_results", id="max-results-21"),
        pytest.param({"query": "x", "max_results": True}, "max_results", id="max-results-bool"),
        pytest.param({"query": "x", "max_results": "5"}, "max_results", id="max-results-str"),
        pytest.param({"query": "x", "region": "usa"}, "region", id="region-3-letters"),
        pytest.param({"query": "x", "region": 7}, "region", id="region-not-string"),
        pytest.param({"query": "x", "freshness": "hour"}, "freshness", id="freshness-hour"),
        pytest.param({"query": "x", "time_range": "2025-01-01"}, "time_range", id="range-1"),
        pytest.param({"query": "x", "time_range": "2025-02-30..2025-03-01"}, "time_range",
                     id="range-bad-date"),
        pytest.param({"query": "x", "time_range": "2025-03-01..2025-01-01"}, "time_range",
                     id="range-reversed"),
        pytest.param({"query": "x", "time_range": "25-1-1..25-2-1"}, "time_range",
                     id="range-short-form"),
        pytest.param({"query": "x", "site": "https://a.com/x"}, "site", id="site-url"),
        pytest.param({"query": "x", "site": "a..com"}, "site", id="site-empty-label"),
        pytest.param({"query": "x", "include_domains": "a.com"}, "include_domains",
                     id="include-string"),
        pytest.param({"query": "x", "include_domains": [f"d{i}.com" for i in range(6)]},
                     "include_domains", id="include-6"),
        pytest.param({"query": "x", "exclude_domains": ["-bad-.com"]}, "exclude_domains",
                     id="exclude-bad-label"),
    ],
)  # fmt: skip
def test_invalid_fields_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        SearchQuery.from_fields(fields)
    assert caught.value.message.startswith(f"{field}: ")
    assert caught.value.code == "invalid_request"


@pytest.mark.parametrize(
    ("text", "rewritten", "year"),
    [
        pytest.param("2026年 大模型 最新进展", "大模型 最新进展", 2026, id="ascii-digits"),
        pytest.param("大模型2026年最新进展", "大模型 最新进展", 2026, id="inside-text"),
        pytest.param("二〇二六年 大模型", "大模型", 2026, id="chinese-digits"),
        pytest.param("二零二五年 诺贝尔奖", "诺贝尔奖", 2025, id="chinese-zero-ling"),
        pytest.param("２０２６年 芯片", "芯片", 2026, id="full-width-digits"),
        pytest.param("2026 年 芯片", "芯片", 2026, id="space-before-nian"),
        pytest.param("2026年底 芯片 出口", "芯片 出口", 2026, id="end-of-year-goes-with-it"),
        pytest.param("2026年中国经济", "中国经济", 2026, id="zhong-is-china-not-mid-year"),
    ],
)
def test_chinese_year_is_rewritten_into_a_window(text: str, rewritten: str, year: int) -> None:
    result = rewrite_chinese_year(SearchQuery(text))
    assert result.query_rewritten
    assert result.freshness_auto_inferred
    assert result.query_year == year
    assert result.query.query == rewritten
    assert result.query.time_range == (date(year, 1, 1), date(year, 12, 31))


@pytest.mark.parametrize(
    ("text", "year"),
    [
        pytest.param("大模型 最新进展", None, id="no-year"),
        pytest.param("2026 大模型", None, id="year-without-nian"),
        pytest.param("2026年3月 发布会", None, id="month-follows"),
        pytest.param("2026年三月 发布会", None, id="chinese-month-follows"),
        pytest.param("2020年代 音乐", None, id="decade"),
        pytest.param("2025年度 报告", None, id="fiscal-year"),
        pytest.param("2020年以来 房价", None, id="since"),
        pytest.param("2026年初中 招生", None, id="chu-ambiguous"),
        pytest.param("2025年 2026年 对比", None, id="two-years"),
        pytest.param("1850年 鸦片战争", None, id="out-of-range"),
        pytest.param("12026年", None, id="five-digits"),
        pytest.param("2026年", 2026, id="nothing-else-left"),
    ],
)
def test_queries_left_alone(text: str, year: int | None) -> None:
    query = SearchQuery(text)
    result = rewrite_chinese_year(query)
    assert not result.query_rewritten
    assert not result.freshness_auto_inferred
    assert result.query is query
    assert result.query_year == year


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"freshness": "month"}, id="freshness"),
        pytest.param({"time_range": "2025-06-01..2025-06-30"}, id="time-range"),
    ],
)
def test_caller_time_filter_wins_over_the_year(fields: dict) -> None:
    query = SearchQuery.from_fields({"query": "2026年 大模型", **fields})
    result = rewrite_chinese_year(query)
    assert result.query is query
    assert (result.query_rewritten, result.freshness_auto_inferred) == (False, False)
    assert result.query_year == 2026
