"""WebSearchTool without HTTP: per-request policy views, report mode, fail-closed audit, text.

The engine is the real chain over an in-process transport that answers like Brave.
"""

from __future__ import annotations

import textwrap

import orjson
import pytest
from multidict import CIMultiDict

from gateway.audit.log import AuditLog
from gateway.errors import AuditWriteError, GatewayError, UnavailableError
from gateway.policy.load import load_policy_file
from gateway.provenance.markers import new_nonce, unwrap, wrap
from gateway.search.canonical import SearchResult, canonical_url, result_id
from gateway.search.chain import ConfiguredProvider, SearchEngine
from gateway.search.health import InMemoryHealthStore
from gateway.search.ids import InMemoryIdStore
from gateway.search.providers import ADAPTERS
from gateway.search.transport import ProviderRequest, ProviderResponse
from gateway.tools.context import CallContext
from gateway.tools.websearch import ViewCache, WebSearchTool, WrappedText, render_text
from tests.tools.searchgateway import brave_ok

HITS = [
    ("Allowed", "https://docs.example.com/a", "fine"),
    ("Denied", "https://denied.example.org/b", "not on the list"),
    ("Private", "http://10.1.2.3/c", "internal"),
]


class BraveAnswers:
    def __init__(self) -> None:
        self.sent: list[ProviderRequest] = []

    async def send(
        self, request: ProviderRequest, *, timeout: float, allow_private: bool
    ) -> ProviderResponse:
        self.sent.append(request)
        headers = CIMultiDict({"Content-Type": "application/json"})
        return ProviderResponse(200, headers, orjson.dumps(brave_ok(HITS)))


def policy(tmp_path, name: str, extra: str = "") -> object:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            domains:
              allow: [".example.com"]
            """
        )
        + textwrap.dedent(extra)
    )
    return load_policy_file(path)[0]


@pytest.fixture
def audit(tmp_path):
    log = AuditLog(str(tmp_path / "audit.jsonl"), instance_id="t", version="0")
    log.open()
    yield log
    log.close()


def records(audit) -> list[dict]:
    with open(audit.path, "rb") as handle:
        return [orjson.loads(line) for line in handle][1:]  # after log_start


def make_tool(audit, ids=None, transport=None) -> WebSearchTool:
    engine = SearchEngine(
        [ConfiguredProvider("brave", ADAPTERS["brave"], "https://b.test", api_key="k" * 12)],
        transport or BraveAnswers(),
        health=InMemoryHealthStore(lambda: 0.0),
    )
    return WebSearchTool(
        engine=engine, audit=audit, ids=ids if ids is not None else InMemoryIdStore(60, lambda: 0.0)
    )


async def test_report_mode_keeps_would_be_denials_and_records_them(tmp_path, audit) -> None:
    ids = InMemoryIdStore(60, lambda: 0.0)
    tool = make_tool(audit, ids)
    ctx = CallContext(policy(tmp_path, "reporting", "mode: report\n"), client_id="c")
    body = await tool.call(ctx, {"query": "q"})
    # The name rule is relaxed in report mode; the private address is enforced in every mode.
    assert [r["url"] for r in body["results"]] == [
        "https://docs.example.com/a",
        "https://denied.example.org/b",
    ]
    assert body["filtered"] == {"policy": 1, "domains": 0}
    (record,) = records(audit)
    assert record["search"]["unenforced_denials"] == 1
    assert record["search"]["filtered_policy"] == 1
    assert await ids.resolve("c", body["results"][1]["id"]) == "https://denied.example.org/b"


async def test_audit_failure_refuses(tmp_path) -> None:
    closed = AuditLog(str(tmp_path / "never-opened.jsonl"), instance_id="t", version="0")
    tool = make_tool(closed)
    ctx = CallContext(policy(tmp_path, "plain"), client_id="c")
    with pytest.raises(AuditWriteError):
        await tool.call(ctx, {"query": "q"})


class RecordsSeen:
    """An id store that notes how many audit records existed when it was asked to store."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        self.seen: list[int] = []
        self._ids = InMemoryIdStore(60, lambda: 0.0)

    async def remember(self, client_id: str, entries) -> None:  # type: ignore[no-untyped-def]
        self.seen.append(len(records(self._audit)))
        await self._ids.remember(client_id, entries)

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        return await self._ids.resolve(client_id, result_id)


async def test_ids_are_stored_before_the_success_record(tmp_path, audit) -> None:
    ids = RecordsSeen(audit)
    body = await make_tool(audit, ids).call(
        CallContext(policy(tmp_path, "plain"), client_id="c"), {"query": "q"}
    )
    assert ids.seen == [0]
    assert await ids.resolve("c", body["results"][0]["id"]) == "https://docs.example.com/a"
    (record,) = records(audit)
    assert record["event"]["outcome"] == "success"


class BrokenIds:
    """An id store whose backend fails as a store can: its own error, or a foreign one."""

    def __init__(self, failure: Exception) -> None:
        self._failure = failure

    async def remember(self, client_id: str, entries) -> None:  # type: ignore[no-untyped-def]
        raise self._failure

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        return None


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        pytest.param(ConnectionError("reset"), "ids could not be stored (ConnectionError)",
                     id="foreign-error"),
        pytest.param(UnavailableError("Redis down; refusing", retry_after=5), "Redis down",
                     id="store-refuses"),
    ],
)  # fmt: skip
async def test_a_failing_id_store_fails_the_call_on_record(
    tmp_path, audit, failure: Exception, words: str
) -> None:
    tool = make_tool(audit, BrokenIds(failure))
    ctx = CallContext(policy(tmp_path, "plain"), client_id="c")
    with pytest.raises(UnavailableError) as caught:
        await tool.call(ctx, {"query": "q"})
    assert words in caught.value.message
    assert caught.value.retry_after
    (record,) = records(audit)  # the failure, and no success before it
    assert (record["event"]["outcome"], record["event"]["type"]) == ("failure", ["error"])
    assert record["error"]["code"] == "unavailable"
    assert words in record["error"]["message"]
    assert record["search"]["ids_stored"] is False
    assert record["search"]["results"] == 1


async def test_no_allowed_results_need_no_id_store(tmp_path, audit) -> None:
    tool = make_tool(audit, BrokenIds(ConnectionError("never asked")))
    (tmp_path / "nothing.yaml").write_text("name: nothing\n")  # allows no URL
    nothing = load_policy_file(tmp_path / "nothing.yaml")[0]
    body = await tool.call(CallContext(nothing, client_id="c"), {"query": "q"})
    assert body["results"] == []
    (record,) = records(audit)
    assert record["event"]["outcome"] == "success"


async def test_render_text_numbers_results_under_a_provenance_header(tmp_path, audit) -> None:
    tool = make_tool(audit)
    marking = policy(tmp_path, "marking", "tools: {WebSearch: {enabled: true, results: mark}}\n")
    body = await tool.call(CallContext(marking, client_id="c"), {"query": "2026年 新闻"})
    text = render_text(body)
    nonce = body["envelope"]["marker"]
    lines = text.splitlines()
    assert lines[0] == "[gateway provenance: written by the gateway, not by the pages]"
    assert f"envelope={body['envelope']['id']}" in lines[1]
    assert "filtered_by_policy=2" in text and f"nonce {nonce}" in text
    assert "The year 2026 was taken out of the query" in text
    assert "Filtered by date: 2026-01-01..2026-12-31." in text  # Brave applied the year
    assert body["query_sent"] == "新闻"
    assert "1. id=" in text and "url=https://docs.example.com/a" in text
    assert "3. id=" in text and "[denied by policy: private_address" not in text
    assert "[denied by policy: domain_not_allowed (default); not fetchable]" in text
    assert "[denied by policy: ip_literal_not_allowed (default); not fetchable]" in text
    # Every title and snippet appears exactly as the response wraps it.
    for result in body["results"]:
        assert result["title"] in text and result["snippet"] in text
        assert unwrap(result["title"], nonce)


def test_render_text_says_when_nothing_was_found() -> None:
    body = {
        "envelope": {
            "id": "e1",
            "marker": "a" * 32,
            "policy": {"name": "p", "rule": "tools.WebSearch.enabled"},
        },
        "provider": "brave",
        "results": [],
        "filtered": {"policy": 0, "domains": 2},
        "warnings": ["ddg: [timeout] no answer within 10 s"],
    }
    text = render_text(body)
    assert "No results." in text and "warning: ddg: [timeout]" in text
    assert "filtered_by_domain=2" in text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("plain title", id="plain"),
        pytest.param("", id="empty"),
        pytest.param("two\nlines\n", id="newlines"),
        pytest.param("nonce=" + "f" * 32 + " looks like a marker", id="nonce-lookalike"),
    ],
)
def test_wrapped_text_with_nonce_is_exactly_wrap(text) -> None:
    placeholder, nonce = new_nonce(), new_nonce()
    template = WrappedText.of(text, "https://a.example.com/x?q=<1>", placeholder)
    assert template.with_nonce(nonce) == wrap(
        text, nonce=nonce, source="https://a.example.com/x?q=<1>"
    )


async def test_views_are_reused_per_policy_and_never_shared(tmp_path) -> None:
    cache = ViewCache(max_entries=2)
    results = tuple(
        SearchResult(result_id(u), t, u, s, u.split("/")[2], None)
        for t, u, s in [(t, canonical_url(u), s) for t, u, s in HITS]
    )
    dropping, marking = (
        policy(tmp_path, "d"),
        policy(tmp_path, "m", "tools: {WebSearch: {enabled: true, results: mark}}\n"),
    )
    first = cache.get(dropping, results)
    assert cache.get(dropping, results) is first
    marked = cache.get(marking, results)
    assert len(first.entries) == 1 and len(marked.entries) == 3
    assert first.digest != marked.digest
    cache.get(policy(tmp_path, "third"), results)  # evicts the least recently used
    assert cache.get(dropping, results) is not first


def test_denied_links_are_cut_out_of_a_model_answer(tmp_path) -> None:
    from gateway.tools.websearch import REMOVED_LINK, without_denied_links

    rules = policy(tmp_path, "answers")
    text = (
        "See [docs](https://docs.example.com/a), then https://denied.example.org/b. "
        "Also http://10.1.2.3/c, and (https://docs.example.com/x?q=1)."
    )
    assert without_denied_links(rules, text) == (
        f"See [docs](https://docs.example.com/a), then {REMOVED_LINK}. "
        f"Also {REMOVED_LINK}, and (https://docs.example.com/x?q=1)."
    )


def test_search_queries_one_or_several_never_both() -> None:
    from gateway.errors import InvalidRequestError
    from gateway.tools.websearch import search_queries

    (one,) = search_queries({"query": "a", "site": "example.com"})
    assert (one.query, one.site) == ("a", "example.com")
    several = search_queries({"queries": ["a", " a ", "b"], "max_results": 3})
    assert [(q.query, q.max_results) for q in several] == [("a", 3), ("b", 3)]
    with pytest.raises(InvalidRequestError, match="not both"):
        search_queries({"query": "a", "queries": ["b"]})
    with pytest.raises(InvalidRequestError, match=r"queries\[1\]"):
        search_queries({"queries": ["a", "\x00"]})


def test_tool_schemas_have_no_top_level_combinators() -> None:
    """Models' tool APIs refuse anyOf/oneOf/allOf at the top of an input schema."""
    from gateway.tools.schema import RESEARCH_REQUEST, SEARCH_REQUEST

    for schema in (SEARCH_REQUEST, RESEARCH_REQUEST):
        assert schema["type"] == "object"
        assert not {"anyOf", "oneOf", "allOf"} & set(schema)
        assert {"query", "queries"} <= set(schema["properties"])


def test_render_text_shows_phrasings_and_the_models_answer() -> None:
    nonce = "c" * 32
    body = {
        "envelope": {"id": "s1", "marker": nonce, "policy": {"name": "p", "rule": "r"}},
        "provider": "gpt",
        "results": [],
        "filtered": {"policy": 0, "domains": 0},
        "warnings": [],
        "queries": ["a", "b"],
        "answer": "<<<wrapped answer>>>",
    }
    text = render_text(body)
    assert "Searched 2 phrasings at once" in text
    assert "The search model's own answer (untrusted" in text and "<<<wrapped answer>>>" in text


CANARY = "tripwire-5d2e8b3c0f"
# A long random label: the entropy detector's (on for host labels by default).
RANDOM_LABEL = "k3j9x2m8q7w1z5v4b6n0c2l8p3r7t9y1"


@pytest.mark.parametrize(
    ("fields", "location"),
    [
        pytest.param({"site": f"{CANARY}.attacker.example"}, "site", id="site-canary"),
        pytest.param({"site": "AKIAIOSFODNN7EXAMPLE.attacker.example"}, "site", id="site-aws-key"),
        pytest.param(
            {"include_domains": ["docs.example.com", f"{RANDOM_LABEL}.attacker.example"]},
            "include_domains[1]:host_label[0]",
            id="include-random-label",
        ),
        pytest.param(
            {"exclude_domains": [f"x.{CANARY}.example"]}, "exclude_domains[0]", id="exclude"
        ),
    ],
)
async def test_search_domain_filters_are_scanned_by_dlp(tmp_path, audit, fields, location) -> None:
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    dlp = f"dlp: {{mode: enforce, canaries_file: {tmp_path / 'canaries.txt'}}}\n"
    transport = BraveAnswers()
    tool = make_tool(audit, transport=transport)
    ctx = CallContext(policy(tmp_path, "watched", dlp), client_id="c")
    with pytest.raises(GatewayError) as refused:
        await tool.call(ctx, {"query": "harmless question", **fields})
    assert refused.value.reason == "sensitive_data"
    assert transport.sent == []  # nothing went to the provider
    (record,) = records(audit)
    assert record["dlp"]["location"] == location
    with open(audit.path) as handle:
        log_text = handle.read()
    assert CANARY not in log_text and RANDOM_LABEL not in log_text
    assert "AKIAIOSFODNN7EXAMPLE" not in log_text


async def test_plain_domain_filters_pass_dlp(tmp_path, audit) -> None:
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    dlp = f"dlp: {{mode: enforce, canaries_file: {tmp_path / 'canaries.txt'}}}\n"
    tool = make_tool(audit)
    ctx = CallContext(policy(tmp_path, "watched", dlp), client_id="c")
    body = await tool.call(
        ctx, {"query": "q", "site": "docs.example.com", "exclude_domains": ["pinterest.com"]}
    )
    assert body["results"]
