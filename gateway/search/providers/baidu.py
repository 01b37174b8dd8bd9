"""Baidu's keyless web search (www.baidu.com/s), third in the default keyless chain.

Asked in its JSON form (`tn=json`), whose entries carry the real target URL; an HTML results
page is read too (the form Baidu falls back to), where each result's real URL is its
container's `mu` attribute. A result that only has a `baidu.com/link?url=` redirect link is
left out: the link cannot be decoded offline, resolving it costs one more request per result
(and brings the captcha sooner), and a baidu.com URL would be judged by the policy as
baidu.com instead of the site it leads to. A captcha (a redirect to wappass.baidu.com, the
"百度安全验证" page, `antiFlag`, an empty page, 403 or 429) is `[blocked]`, never "no results".
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlencode

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, endpoint
from gateway.search.providers.decoding import (
    HTML_USER_AGENT,
    MAX_PARSED_RESULTS,
    dig,
    excerpt,
    failure_for_status,
    items,
    load_html,
    node_text,
    query_with_site_operators,
    raw_result,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse, retry_after_seconds

DEFAULT_BASE_URL = "https://www.baidu.com"
_FRESHNESS_SECONDS = {
    Freshness.DAY: 86_400,
    Freshness.WEEK: 604_800,
    Freshness.MONTH: 2_592_000,
    Freshness.YEAR: 31_536_000,
}
_CAPTCHA_LOCATIONS = ("wappass.baidu.com", "/captcha")
_CAPTCHA_TEXTS = ("百度安全验证".encode(), "安全验证".encode() + b"</title>")
_NO_RESULTS_TEXTS = ("未找到相关结果".encode(), "抱歉没有找到".encode())
_BLOCK_STATUSES = {403, 429}
_CN_DATE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日")


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    params = {
        "wd": query_with_site_operators(query, or_supported=False),
        "rn": str(max(query.max_results, 10)),
        "pn": "0",
        "tn": "json",
        "ie": "utf-8",
    }
    window = _time_window(query)
    if window is not None:
        params["gpc"] = f"stf={window[0]},{window[1]}|stftype=1"
    return ProviderRequest(
        method="GET",
        url=endpoint(base_url, "/s") + "?" + urlencode(params),
        headers={
            "User-Agent": HTML_USER_AGENT,
            "Accept": "application/json, text/html;q=0.9",
            "Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8",
        },
    )


def applies_time_filter(query: SearchQuery) -> bool:
    return query.has_time_filter


def parse(response: ProviderResponse) -> list[RawResult]:
    _raise_if_blocked(response)
    failure = failure_for_status(response)
    if failure:
        raise failure
    body = response.body.lstrip(b"\xef\xbb\xbf \t\r\n")
    if body.startswith(b"{"):
        return _parse_json(body)
    return _parse_html(response)


def _raise_if_blocked(response: ProviderResponse) -> None:
    status = response.status
    location = response.headers.get("Location", "")
    if 300 <= status < 400 and any(m in location for m in _CAPTCHA_LOCATIONS):
        raise ProviderError(
            ErrorClass.BLOCKED,
            f"captcha: Baidu redirected to its security check (HTTP {status}, "
            f"{excerpt(location, 60)!r})",
        )
    if status in _BLOCK_STATUSES:
        raise ProviderError(
            ErrorClass.BLOCKED,
            f"HTTP {status}: Baidu refuses this address",
            retry_after_seconds(response),
        )
    if 200 <= status < 300:
        head = response.body[:200_000]
        if not head.strip() or any(marker in head for marker in _CAPTCHA_TEXTS):
            raise ProviderError(
                ErrorClass.BLOCKED, "captcha page (百度安全验证): Baidu is checking this address"
            )


def _parse_json(body: bytes) -> list[RawResult]:
    try:
        # Not orjson: Baidu's JSON may hold raw control characters, which strict parsers refuse.
        data = json.loads(body.decode("utf-8", "replace"), strict=False)
    except ValueError:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "malformed JSON from Baidu") from None
    if not isinstance(data, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "expected a JSON object")
    if data.get("antiFlag") == 1:
        raise ProviderError(
            ErrorClass.BLOCKED,
            f"anti-spider flag: {excerpt(data.get('message') or 'access denied', 80)}",
        )
    entries = dig(data, "feed", "entry")
    if entries is None:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "no feed.entry list in Baidu's JSON")
    if not isinstance(entries, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "feed.entry is not a list")
    results = []
    for entry in items(entries):
        found = raw_result(entry.get("title"), entry.get("url"), entry.get("abs"))
        if found is None:
            continue
        published = _unix_date(entry.get("time"))
        results.append(
            RawResult(found.title, found.url, found.snippet, published or found.published_at)
        )
    return results


def _parse_html(response: ProviderResponse) -> list[RawResult]:
    tree = load_html(response, encoding="utf-8")  # Baidu's pages are UTF-8
    content = tree.xpath("//div[@id='content_left']")
    if not content:
        if any(text in response.body for text in _NO_RESULTS_TEXTS):
            return []
        raise ProviderError(
            ErrorClass.INVALID_RESPONSE, "page layout not recognised (no #content_left)"
        )
    results: list[RawResult] = []
    containers = content[0].xpath(".//div[contains(@class,'c-container')]")
    for block in containers[:MAX_PARSED_RESULTS]:
        if _is_ad(block):
            continue
        target = (block.get("mu") or "").strip()
        heading = next(iter(block.xpath(".//h3")), None)
        if not target or heading is None:
            continue  # only a baidu.com/link redirect, or a card without a title: left out
        snippet = next(
            iter(
                block.xpath(
                    ".//*[contains(@class,'summary-text_') or "
                    "starts-with(@class,'content-right_') or contains(@class,'c-abstract')]"
                )
            ),
            None,
        )
        when = next(
            iter(
                block.xpath(
                    ".//span[contains(@class,'cos-color-text-minor') or "
                    "contains(@class,'c-color-gray2')]"
                )
            ),
            None,
        )
        found = raw_result(node_text(heading), target, node_text(snippet))
        if found is not None:
            published = _chinese_date(node_text(when)) if when is not None else None
            results.append(RawResult(found.title, found.url, found.snippet, published))
    return results


def _is_ad(block: Any) -> bool:
    if block.get("data-tuiguang") is not None:
        return True
    return any(node_text(span).strip() == "广告" for span in block.xpath(".//span"))


def _time_window(query: SearchQuery) -> tuple[int, int] | None:
    if query.time_range is not None:
        start, end = query.time_range
        return _epoch(start), _epoch(end) + 86_399
    if query.freshness is not None:
        now = int(time.time())
        return now - _FRESHNESS_SECONDS[query.freshness], now
    return None


def _epoch(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def _unix_date(value: Any) -> str | None:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value[:12])
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 10**11:
        return None
    moment = datetime.fromtimestamp(value, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _chinese_date(text: str) -> str | None:
    match = _CN_DATE.search(text)
    if not match:
        return None
    try:
        return date(*(int(part) for part in match.groups())).isoformat()
    except ValueError:
        return None


ADAPTER = ProviderAdapter(
    kind="baidu",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=False,
    build_request=build_request,
    parse=parse,
    applies_time_filter=applies_time_filter,
)
