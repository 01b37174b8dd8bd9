"""POST /v1/research end to end: one search, then pages read through the WebFetch path."""

from __future__ import annotations

import functools

import pytest

from gateway.provenance.dsse import generate_keypair, load_public_key
from gateway.provenance.envelope import verify_response
from gateway.provenance.markers import unwrap
from gateway.tools.responses import RESEARCH_RESPONSE
from tests.conformance import assert_conforms
from tests.server.conftest import audit_records, policies_for


@pytest.fixture
def start(search_gateways, upstream):
    policies = policies_for(
        upstream.port, agent={}, nofetch={"fetch": False}, nosearch={"search": False}
    )
    return functools.partial(search_gateways, policies=policies)


def actions(gateway) -> list[str]:
    return [
        r["event"]["action"]
        for r in audit_records(gateway.services)
        if r["event"]["action"] in ("WebSearch", "WebFetch", "Research")
    ]


async def test_research_reads_top_pages_and_reports_a_failed_one(start, upstream) -> None:
    gateway = await start()
    status, body = await gateway.post("/v1/research", "agent", query="research", fetch_top_n=3)
    assert status == 200, body
    assert_conforms(RESEARCH_RESPONSE, body)
    assert set(body) == {"search", "pages", "passages", "envelope", "note", "cached"}
    search = body["search"]
    assert search["envelope"]["tool"] == "WebSearch" and search["filtered"]["policy"] == 4
    port = upstream.port
    assert [page.get("rank") for page in body["pages"]] == [1, 2, 3]
    first, second, failed = body["pages"]
    assert first["envelope"]["tool"] == "WebFetch"
    assert first["envelope"]["final_url"] == f"http://site.example.com:{port}/page"
    text = unwrap(first["content"], first["envelope"]["marker"])
    assert text.startswith("# Hello")
    assert second["envelope"]["final_url"] == f"http://other.example.com:{port}/page"
    # Each page has its own nonce, distinct from the search's.
    nonces = {search["envelope"]["marker"], first["envelope"]["marker"]}
    assert len(nonces | {second["envelope"]["marker"]}) == 3
    # internal.example.com passes steps 1-3 but resolves to 10.0.0.5: refused at fetch time.
    assert failed == {
        "url": f"http://internal.example.com:{port}/page",
        "rank": 3,
        "error": {
            "code": "policy_denied",
            "message": failed["error"]["message"],
            "reason": "private_address",
        },
    }
    assert body["note"] == (
        f"Read 2 of 3 chosen pages: http://site.example.com:{port}/page (result 1); "
        f"http://other.example.com:{port}/page (result 2). Not read: "
        f"http://internal.example.com:{port}/page (result 3): policy_denied, private_address."
    )
    assert actions(gateway) == ["Research", "WebFetch", "WebFetch", "WebFetch"]
    records = [r for r in audit_records(gateway.services) if r["event"]["action"] == "WebFetch"]
    assert sorted(r["event"]["outcome"] for r in records) == ["failure", "success", "success"]
    # Each envelope leads to its own record: the search's to Research's, a page's to its fetch.
    by_id = {r["event"].get("id"): r for r in audit_records(gateway.services)}
    assert by_id[search["envelope"]["id"]]["event"]["action"] == "Research"
    for page in (first, second):
        record = by_id[page["envelope"]["id"]]
        assert record["event"]["action"] == "WebFetch"
        assert record["url"]["full"] == page["envelope"]["final_url"]
    research = next(
        r for r in audit_records(gateway.services) if r["event"]["action"] == "Research"
    )
    assert research["search"]["results"] == 4 and research["search"]["filtered_policy"] == 4


@pytest.mark.parametrize(
    ("mode", "length", "expected_chars"),
    [
        pytest.param("summary", 12, 12, id="summary-cut"),
        pytest.param("full", 5, 5, id="full-cut"),
        pytest.param("summary", None, None, id="summary-whole-short-page"),
    ],
)
async def test_page_length_and_mode(start, upstream, mode, length, expected_chars) -> None:
    gateway = await start()
    fields = {"query": "cut", "fetch_top_n": 1, "extract_mode": mode}
    if length is not None:
        fields["max_page_length"] = length
    status, body = await gateway.post("/v1/research", "agent", **fields)
    assert status == 200
    (page,) = body["pages"]
    env = page["envelope"]
    text = unwrap(page["content"], env["marker"])
    assert env["extract_mode"] == "markdown" and env["start_index"] == 0
    if expected_chars is None:
        assert env["truncated"] is False and env["chars"] == env["total_chars"] == len(text)
    else:
        assert env["chars"] == len(text) == expected_chars and env["truncated"] is True


async def test_full_reads_the_whole_page_summary_the_main_content(start, upstream) -> None:
    gateway = await start()
    texts = {}
    for mode in ("summary", "full"):
        status, body = await gateway.post(
            "/v1/research", "agent", query="modes", fetch_top_n=1, extract_mode=mode
        )
        assert status == 200
        (page,) = body["pages"]
        texts[mode] = unwrap(page["content"], page["envelope"]["marker"])
    # The test page has a nav ("menu") and a footer outside its article.
    assert "menu" not in texts["summary"] and "footer" not in texts["summary"]
    assert "menu" in texts["full"] and "footer" in texts["full"] and "# Hello" in texts["full"]


async def test_pages_are_picked_across_domains(start, upstream) -> None:
    port = upstream.port
    hits = [
        ("A1", f"http://site.example.com:{port}/page", "a"),
        ("A2", f"http://site.example.com:{port}/text?body=second", "a"),
        ("A3", f"http://site.example.com:{port}/json", "a"),
        ("B1", f"http://other.example.com:{port}/page", "b"),
    ]
    gateway = await start(hits=hits)
    status, body = await gateway.post("/v1/research", "agent", query="spread", fetch_top_n=3)
    assert status == 200
    assert [(p["rank"], p["envelope"]["final_url"]) for p in body["pages"]] == [
        (1, f"http://site.example.com:{port}/page"),
        (2, f"http://site.example.com:{port}/text?body=second"),
        (4, f"http://other.example.com:{port}/page"),
    ]


async def test_fetch_top_n_zero_only_searches(start) -> None:
    gateway = await start()
    status, body = await gateway.post("/v1/research", "agent", query="none", fetch_top_n=0)
    assert status == 200 and body["pages"] == [] and len(body["search"]["results"]) == 4
    assert actions(gateway) == ["Research"]


@pytest.mark.parametrize(
    ("client_id", "rule"),
    [
        pytest.param("nofetch", "tools.WebFetch.enabled", id="webfetch-off"),
        pytest.param("nosearch", "tools.WebSearch.enabled", id="websearch-off"),
    ],
)
async def test_research_needs_both_tools(start, client_id, rule) -> None:
    gateway = await start()
    status, error = await gateway.post("/v1/research", client_id, query="x")
    assert status == 403
    assert (error["error"]["code"], error["error"]["rule"]) == ("tool_disabled", rule)
    assert gateway.requests_to("brave") == 0
    assert actions(gateway) == ["Research"]


async def test_research_search_failure_fails_the_call(start) -> None:
    gateway = await start(providers=(("searx", "searxng"),))
    from tests.search.conftest import Reply

    gateway.fakes["searx"].queue(Reply(403, "<html>Forbidden</html>"))
    status, error = await gateway.post("/v1/research", "agent", query="x")
    assert status == 502 and error["error"]["code"] == "upstream_error"
    assert "searx: [http_4xx]" in error["error"]["message"]


async def test_signed_research_verifies_part_by_part(start, tmp_path) -> None:
    private, public, _ = generate_keypair(tmp_path / "keys")
    gateway = await start(signing_key=str(private))
    status, body = await gateway.post("/v1/research", "agent", query="signed", fetch_top_n=3)
    assert status == 200
    assert "dsse" in body["search"] and "dsse" in body["pages"][0]
    verify_response(body, [load_public_key(public)])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        pytest.param({"query": "x", "fetch_top_n": 6}, "fetch_top_n", id="top-n"),
        pytest.param({"query": "x", "extract_mode": "raw"}, "extract_mode", id="mode"),
        pytest.param({"query": "x", "max_page_length": 0}, "max_page_length", id="length"),
    ],
)
async def test_bad_research_requests(start, body, fragment) -> None:
    gateway = await start()
    status, error = await gateway.post("/v1/research", "agent", **body)
    assert status == 400 and fragment in error["error"]["message"]


async def test_research_pages_are_refused_at_the_socket_when_the_checks_above_it_fail(
    search_gateways, upstream, monkeypatch
) -> None:
    # The client's policy does not exempt loopback, so its pages' addresses are private. With
    # every address check above the socket made to allow everything (an injected fault), the
    # socket guard still refuses each page, and the site is never asked for one.
    from gateway.fetch import client as client_module
    from gateway.fetch import resolver as resolver_module
    from gateway.policy.engine import Decision
    from tests.tools.searchgateway import client_policy

    def allow_everything(policy, port, addresses, *, own_addresses=()):
        return Decision(True, None, "injected-fault", policy.name, policy.sha256)

    text = client_policy(upstream.port, "strict-policy").replace(
        'allow: ["127.0.0.0/8"]', "allow: []"
    )
    gateway = await search_gateways(policies={"agent": text})
    for module in (resolver_module, client_module):
        monkeypatch.setattr(module, "decide_answer", allow_everything)
    status, body = await gateway.post("/v1/research", "agent", query="research", fetch_top_n=2)
    assert status == 200, body
    assert len(body["pages"]) == 2
    for page in body["pages"]:
        assert page["error"]["code"] == "policy_denied", page
        assert page["error"]["reason"] == "private_address"
    records = [r for r in audit_records(gateway.services) if r["event"]["action"] == "WebFetch"]
    assert {r["policy"]["rule"] for r in records} == {"networks.block_private"}
    assert all(r["event"]["outcome"] == "failure" for r in records)


async def test_a_repeat_is_answered_from_the_cache_and_recorded(start) -> None:
    gateway = await start()
    fields = {"query": "cached research", "fetch_top_n": 2}
    status, first = await gateway.post("/v1/research", "agent", **fields)
    assert status == 200 and first["cached"] is False
    searches = gateway.requests_to("brave")
    status, again = await gateway.post("/v1/research", "agent", **fields)
    assert status == 200, again
    assert_conforms(RESEARCH_RESPONSE, again)
    assert again["cached"] is True
    assert {k: v for k, v in again.items() if k != "cached"} == {
        k: v for k, v in first.items() if k != "cached"
    }
    assert gateway.requests_to("brave") == searches  # no provider asked again
    # and no page read again: every page read writes its own WebFetch record
    assert actions(gateway) == ["Research", "WebFetch", "WebFetch", "Research"]
    repeat = [r for r in audit_records(gateway.services) if r["event"]["action"] == "Research"][-1]
    assert repeat["event"]["outcome"] == "success" and repeat["search"]["cached"] is True
    # Another field is another answer.
    status, other = await gateway.post("/v1/research", "agent", **fields, max_passages=3)
    assert status == 200 and other["cached"] is False


async def test_a_cached_answer_is_refused_when_the_policy_now_refuses(start) -> None:
    gateway = await start()
    await gateway.post("/v1/research", "agent", query="q one", fetch_top_n=1)
    status, body = await gateway.post("/v1/research", "nosearch", query="q one", fetch_top_n=1)
    assert status == 403 and body["error"]["reason"] == "tool_disabled"
