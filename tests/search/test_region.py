"""`region`: country-language read in that order, and what each provider is sent for it.

Every row of docs/search.md's region table is checked here against the request a fake
provider (an aiohttp server on loopback) receives.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest

from gateway.errors import InvalidRequestError
from gateway.search.providers import ADAPTERS
from gateway.search.query import SearchQuery
from gateway.search.region import Region, parse_region
from tests.search.conftest import FakeUpstream, LoopbackTransport, Reply


@pytest.mark.parametrize(
    ("text", "country", "language"),
    [
        ("us-en", "us", "en"),
        ("cn-zh", "cn", "zh"),
        ("CN_zh", "cn", "zh"),
        ("de", "de", None),
        ("uk-en", "gb", "en"),  # DuckDuckGo's spelling of the United Kingdom
        ("jp-jp", "jp", "ja"),
        ("kr-kr", "kr", "ko"),
        ("tw-tzh", "tw", "zh"),
        (" es-ca ", "es", "ca"),  # Spain in Catalan
    ],
)
def test_country_comes_first(text: str, country: str, language: str | None) -> None:
    assert parse_region(text) == Region(country, language)


def test_wt_wt_is_no_region() -> None:
    assert parse_region("wt-wt") is None
    query = SearchQuery("q", region="wt-wt")
    assert (query.region, query.country, query.language) == (None, None, None)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("zh-cn", "country comes first: 'cn-zh'"),
        ("en-us", "country comes first: 'us-en'"),
        ("en", "'en' is not an ISO 3166 country"),
        ("us-xx", "'xx' is not an ISO 639-1 language"),
        ("usa", "is not country-language"),
        ("us-en-gb", "is not country-language"),
        ("", "is not country-language"),
        (7, "must be a string"),
    ],
)
def test_anything_else_is_refused_naming_the_field(text: Any, words: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        SearchQuery.from_fields({"query": "q", "region": text})
    assert caught.value.message.startswith("region: ")
    assert words in caught.value.message


def test_bare_country_searches_in_its_usual_language() -> None:
    query = SearchQuery("q", region="de")
    assert (query.region, query.language, query.search_language) == ("de", None, "de")
    assert SearchQuery("q", region="ke").search_language is None


# The table in docs/search.md, row by row: region -> what each provider receives. None: the
# parameter is not sent at all.
TABLE: dict[str, dict[str, dict[str, Any]]] = {
    "us-en": {
        "duckduckgo": {"kl": "us-en"},
        "bing": {"mkt": "en-US", "setlang": "en", "cc": None},
        "brave": {"country": "US", "search_lang": "en"},
        "serper": {"gl": "us", "hl": "en"},
        "tavily": {"country": "united states"},
        "searxng": {"language": "en-US"},
    },
    "cn-zh": {
        "duckduckgo": {"kl": "cn-zh"},
        "bing": {"mkt": "zh-CN", "setlang": "zh", "cc": None},
        "brave": {"country": "CN", "search_lang": "zh-hans"},
        "serper": {"gl": "cn", "hl": "zh-cn"},
        "tavily": {"country": "china"},
        "searxng": {"language": "zh-CN"},
    },
    "de": {
        "duckduckgo": {"kl": "de-de"},
        "bing": {"mkt": "de-DE", "setlang": "de", "cc": None},
        "brave": {"country": "DE", "search_lang": "de"},
        "serper": {"gl": "de", "hl": "de"},
        "tavily": {"country": "germany"},
        "searxng": {"language": "de-DE"},
    },
    "uk-en": {
        "duckduckgo": {"kl": "uk-en"},
        "bing": {"mkt": "en-GB", "setlang": "en", "cc": None},
        "brave": {"country": "GB", "search_lang": "en-gb"},
        "serper": {"gl": "gb", "hl": "en"},
        "tavily": {"country": "united kingdom"},
        "searxng": {"language": "en-GB"},
    },
    "tw-tzh": {
        "duckduckgo": {"kl": "tw-tzh"},
        "bing": {"mkt": "zh-TW", "setlang": "zh", "cc": None},
        "brave": {"country": "TW", "search_lang": "zh-hant"},
        "serper": {"gl": "tw", "hl": "zh-tw"},
        "tavily": {"country": "taiwan"},
        "searxng": {"language": "zh-TW"},
    },
    "jp-jp": {
        "duckduckgo": {"kl": "jp-jp"},
        "bing": {"mkt": "ja-JP", "setlang": "ja", "cc": None},
        "brave": {"country": "JP", "search_lang": "jp"},
        "serper": {"gl": "jp", "hl": "ja"},
        "tavily": {"country": "japan"},
        "searxng": {"language": "ja-JP"},
    },
    "ke": {  # a country without a usual language in the table: only the country goes
        "duckduckgo": {"kl": None},
        "bing": {"mkt": None, "setlang": None, "cc": "KE"},
        "brave": {"country": None, "search_lang": None},  # Brave does not take KE
        "serper": {"gl": "ke", "hl": None},
        "tavily": {"country": None},
        "searxng": {"language": None},
    },
    "wt-wt": {
        "duckduckgo": {"kl": None},
        "bing": {"mkt": None, "setlang": None, "cc": None},
        "brave": {"country": None, "search_lang": None},
        "serper": {"gl": None, "hl": None},
        "tavily": {"country": None},
        "searxng": {"language": None},
    },
}
REGION_FIELDS = ("kl", "mkt", "setlang", "cc", "country", "search_lang", "gl", "hl", "language")
ROWS = [(region, kind, sent) for region, row in TABLE.items() for kind, sent in row.items()]


def _received(kind: str, fake: FakeUpstream) -> dict[str, Any]:
    """The parameters the fake provider received: query string, form or JSON body."""
    request = fake.requests[0]
    if kind == "duckduckgo":
        return {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
    if kind in ("serper", "tavily"):
        return dict(request.json())
    return dict(request.query)


@pytest.mark.parametrize(("region", "kind", "sent"), ROWS, ids=[f"{r}-{k}" for r, k, _ in ROWS])
async def test_each_provider_receives_the_table_row(
    upstream: Any, transport: LoopbackTransport, region: str, kind: str, sent: dict[str, Any]
) -> None:
    fake = await upstream()
    fake.queue(Reply(200, {}))
    request = ADAPTERS[kind].build_request(SearchQuery("q", region=region), fake.base_url, "k")
    await transport.send(request, timeout=5, allow_private=True)
    received = _received(kind, fake)
    assert {name: received.get(name) for name in sent} == sent
    assert not (set(REGION_FIELDS) - set(sent)) & set(received)  # nothing else slipped in


async def test_baidu_is_sent_no_region(upstream: Any, transport: LoopbackTransport) -> None:
    fake = await upstream()
    fake.queue(Reply(200, {}))
    request = ADAPTERS["baidu"].build_request(SearchQuery("q", region="cn-zh"), fake.base_url, None)
    await transport.send(request, timeout=5, allow_private=True)
    assert not set(fake.requests[0].query) & set(REGION_FIELDS)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_model_native_providers_get_the_country(
    upstream: Any, transport: LoopbackTransport, kind: str
) -> None:
    fake = await upstream()
    fake.queue(Reply(200, {}))
    request = ADAPTERS[kind].build_request(SearchQuery("q", region="cn-zh"), fake.base_url, "k")
    await transport.send(request, timeout=5, allow_private=True)
    tool = fake.requests[0].json()["tools"][0]
    assert tool["user_location"] == {"type": "approximate", "country": "CN"}
