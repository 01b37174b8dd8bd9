"""Outbound DLP on every surface, on loopback, in both modes: WebFetch, WebSearch, the proxy's
plain HTTP (request line, headers, body prefix) and CONNECT host names. The audit record's
shape, and that the secret is in no log line, no record and no error."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from gateway.config import ResolverConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.tools.responses import EXPLAIN_RESPONSE
from tests.conformance import assert_conforms
from tests.conftest import STATIC_HOSTS, loopback_policy
from tests.server.conftest import audit_records
from tests.server.proxy.env import curl, parse_head, raw_exchange, start_env
from tests.tools.searchgateway import client_policy

CANARY = "tripwire-4c1f7a2b9e"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
# A long random label: the entropy detector's (on for host labels by default).
RANDOM_LABEL = "k3j9x2m8q7w1z5v4b6n0c2l8p3r7t9y1"
SECRETS = (CANARY, STRIPE, RANDOM_LABEL)
MODES = ("enforce", "report")


def dlp_section(mode: str, canaries: str) -> str:
    return f"dlp: {{mode: {mode}, canaries_file: {canaries}}}\n"


@pytest.fixture(autouse=True)
def every_log_line(caplog):
    """Every log record at every level, to look for secrets in."""
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_nowhere(*texts: str | bytes, caplog, upstream_saw: bool = False) -> None:
    """No secret, in any of the encodings the tests plant it in, in any of `texts` nor in
    any log line. `upstream_saw`: report mode sent it on, so the test upstream's own access
    log holds it (that log is the destination's, not the gateway's)."""
    forms = set()
    for secret in SECRETS:
        forms |= {secret, base64.b64encode(secret.encode()).decode(), secret.encode().hex()}
    logged = "\n".join(
        record.getMessage() + " " + repr(record.__dict__)
        for record in caplog.records
        if not (upstream_saw and record.name == "aiohttp.access")
    )
    for text in (*texts, logged):
        shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        for form in forms:
            assert form not in shown


def assert_dlp_block(record: dict, detector: str, location: str) -> None:
    block = record["dlp"]
    assert set(block) == {"detector", "location", "fingerprint"}
    assert block["detector"] == detector and block["location"] == location
    assert len(block["fingerprint"]) == 24 and int(block["fingerprint"], 16) >= 0


# --- WebFetch -------------------------------------------------------------------------------


@pytest.fixture
async def fetch_gateway(upstream, write_policy, make_config, aiohttp_client, tmp_path, request):
    mode = request.param
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    canaries = str(tmp_path / "canaries.txt")
    policy = write_policy(loopback_policy(upstream.port, extra=dlp_section(mode, canaries)))
    services = Services(make_config(policy))
    services.open()
    client = await aiohttp_client(make_app(services))
    yield mode, client, services
    await services.close()


@pytest.mark.parametrize("fetch_gateway", MODES, indirect=True)
async def test_webfetch(fetch_gateway, upstream, caplog) -> None:
    mode, client, services = fetch_gateway
    url = f"http://site.example.com:{upstream.port}/page?ref=docs&note={CANARY}"
    response = await client.post("/v1/fetch", json={"url": url})
    body = await response.text()
    [record] = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    assert record["policy"]["reason"] == "sensitive_data"
    assert record["policy"]["rule"] == "dlp.canary"
    assert_dlp_block(record, "canary", "query:note")
    assert record["url"]["original"].endswith("note=[REDACTED:dlp.canary]")
    if mode == "enforce":
        assert response.status == 403
        assert record["policy"]["enforced"] is True and record["event"]["type"] == ["denied"]
        assert response.headers.get("X-Gateway-Rule", "dlp.canary") == "dlp.canary"
        assert "sensitive_data" in body and "query:note" in body
        assert "destination" not in record  # refused before any connection
    else:
        assert response.status == 200
        assert record["policy"]["enforced"] is False and record["event"]["outcome"] == "success"
        assert record["url"]["full"].endswith("note=[REDACTED:dlp.canary]")
        assert record["http"]["response"]["status_code"] == 200  # report lets it through
        body = ""  # the envelope names the URL the agent asked for, to that agent
    with open(services.audit.path, "rb") as handle:
        assert_nowhere(body, handle.read(), caplog=caplog, upstream_saw=mode == "report")


@pytest.mark.parametrize("fetch_gateway", ["enforce"], indirect=True)
async def test_webfetch_host_label_is_refused_before_any_lookup(fetch_gateway, caplog) -> None:
    _, client, services = fetch_gateway
    # The name resolves nowhere: a lookup would fail as upstream_unreachable instead.
    response = await client.post(
        "/v1/fetch", json={"url": f"https://{RANDOM_LABEL}.collector.example.com/x"}
    )
    body = await response.text()
    assert response.status == 403 and "sensitive_data" in body
    [record] = audit_records(services)[-1:]
    assert_dlp_block(record, "entropy", "host_label[0]")
    assert record["url"]["original"] == "https://[REDACTED:dlp.entropy].collector.example.com/x"
    with open(services.audit.path, "rb") as handle:
        assert_nowhere(body, handle.read(), caplog=caplog)


# --- WebSearch ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_websearch(search_gateways, upstream, tmp_path, mode, caplog) -> None:
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    text = client_policy(upstream.port, "agent-policy") + dlp_section(
        mode, str(tmp_path / "canaries.txt")
    )
    gateway = await search_gateways(policies={"agent": text})
    status, body = await gateway.search("agent", query=f"what is {STRIPE} for")
    [record] = [r for r in audit_records(gateway.services) if r["event"]["action"] == "WebSearch"]
    assert record["policy"]["rule"] == "dlp.stripe_key"
    assert_dlp_block(record, "stripe_key", "search_query")
    if mode == "enforce":
        assert status == 403 and body["error"]["reason"] == "sensitive_data"
        assert gateway.requests_to("brave") == 0  # never sent to a provider
    else:
        assert status == 200
        assert record["search"]["query"] == "what is [REDACTED:dlp.stripe_key] for"
        assert gateway.requests_to("brave") == 1
        body = {}  # the answer repeats the query to the agent that asked
    with open(gateway.services.audit.path, "rb") as handle:
        assert_nowhere(repr(body), handle.read(), caplog=caplog, upstream_saw=mode == "report")


# --- a secret and its companion: the whole piece goes from the record -------------------------

AWS_PAIR = "AKIAQ3EGRT5LWX7ZP2NB:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def assert_pair_nowhere(text: bytes | str) -> None:
    shown = text.decode() if isinstance(text, bytes) else text
    for part in AWS_PAIR.split(":") + AWS_PAIR.split("/")[1:]:
        assert part not in shown and part.lower() not in shown.lower()


@pytest.mark.parametrize("fetch_gateway", MODES, indirect=True)
async def test_dlp_redacts_a_key_pair_whole_in_a_webfetch_record(fetch_gateway, upstream) -> None:
    mode, client, services = fetch_gateway
    url = f"http://site.example.com:{upstream.port}/page?ref=docs&q={AWS_PAIR}&n=1"
    response = await client.post("/v1/fetch", json={"url": url})
    assert response.status == (403 if mode == "enforce" else 200)
    [record] = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    assert record["policy"]["rule"] == "dlp.aws_access_key"
    assert record["url"]["original"].endswith("?ref=docs&q=[REDACTED:dlp.aws_access_key]&n=1")
    with open(services.audit.path, "rb") as handle:
        assert_pair_nowhere(handle.read())


@pytest.mark.parametrize("mode", MODES)
async def test_dlp_redacts_a_key_pair_whole_in_a_websearch_record(
    search_gateways, upstream, tmp_path, mode
) -> None:
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    text = client_policy(upstream.port, "agent-policy") + dlp_section(
        mode, str(tmp_path / "canaries.txt")
    )
    gateway = await search_gateways(policies={"agent": text})
    status, _ = await gateway.search("agent", query=f"who owns {AWS_PAIR} today")
    assert status == (403 if mode == "enforce" else 200)
    [record] = [r for r in audit_records(gateway.services) if r["event"]["action"] == "WebSearch"]
    assert record["policy"]["rule"] == "dlp.aws_access_key"
    if mode == "report":
        # The credential-shaped word goes whole before DLP looks (audit/redaction.py).
        assert record["search"]["query"] == "who owns REDACTED today"
    with open(gateway.services.audit.path, "rb") as handle:
        assert_pair_nowhere(handle.read())


# --- the forward proxy ----------------------------------------------------------------------


@pytest.fixture
async def proxy(tmp_path, make_config, request):
    mode = request.param
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    hosts = {**STATIC_HOSTS, f"{RANDOM_LABEL}.site.example.com": ("127.0.0.1",)}

    def config(path, **fields):
        return make_config(path, resolver=ResolverConfig(hosts=hosts), **fields)

    env = await start_env(
        tmp_path,
        config,
        policy_extra=dlp_section(mode, str(tmp_path / "canaries.txt")),
    )
    yield mode, env
    await env.close()


@pytest.mark.parametrize("proxy", MODES, indirect=True)
@pytest.mark.parametrize(
    ("where", "detector", "location"),
    [
        ("line", "canary", "query:q"),
        ("header", "stripe_key", "header:x-context"),
        ("body", "canary", "body"),
    ],
)
async def test_proxy_http(proxy, where, detector, location, caplog) -> None:
    mode, env = proxy
    args = ["-x", env.proxy_url]
    url = env.url("/echo")
    if where == "line":
        url += f"?q={CANARY}"
    elif where == "header":
        args += ["-H", f"X-Context: {STRIPE}"]
    else:
        args += ["--data-binary", f'{{"note": "{CANARY}"}}']
    result = await curl(*args, url)
    [record] = env.records("proxy_http")
    assert record["policy"]["reason"] == "sensitive_data"
    assert record["policy"]["rule"] == f"dlp.{detector}"
    assert_dlp_block(record, detector, location)
    if mode == "enforce":
        assert result.status == 403
        assert result.headers["x-gateway-reason"] == "sensitive_data"
        assert result.headers["x-gateway-rule"] == f"dlp.{detector}"
        assert record["policy"]["enforced"] is True and record["event"]["type"] == ["denied"]
        assert_nowhere(result.body, caplog=caplog)
    else:
        assert result.status == 200  # the upstream echoes what it got: the secret went out
        assert record["policy"]["enforced"] is False and record["event"]["type"] == ["allowed"]
    with open(env.services.audit.path, "rb") as handle:
        assert_nowhere(handle.read(), caplog=caplog, upstream_saw=mode == "report")


@pytest.mark.parametrize("proxy", MODES, indirect=True)
async def test_proxy_connect_host(proxy, caplog) -> None:
    mode, env = proxy
    authority = f"{RANDOM_LABEL}.site.example.com:{env.tls_port}"
    raw = await raw_exchange(
        env.port,
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode(),
        read_timeout=1.0,
    )
    status, headers, body = parse_head(raw)
    [record] = env.records("proxy_connect")
    assert record["policy"]["reason"] == "sensitive_data"
    assert_dlp_block(record, "entropy", "host_label[0]")
    assert RANDOM_LABEL not in record["url"]["original"]
    if mode == "enforce":
        assert status == 403 and headers["x-gateway-rule"] == "dlp.entropy"
        assert_nowhere(body, caplog=caplog)
    else:
        assert status == 200  # resolved (after the decision) and tunnelled
    with open(env.services.audit.path, "rb") as handle:
        assert_nowhere(handle.read(), caplog=caplog)


@pytest.mark.parametrize("proxy", ["enforce"], indirect=True)
async def test_proxy_clean_requests_pass(proxy) -> None:
    _, env = proxy
    result = await curl("-x", env.proxy_url, "-H", "X-Context: weekly report", env.url("/page"))
    assert result.status == 200
    [record] = env.records("proxy_http")
    assert "dlp" not in record and record["policy"]["reason"] is None


# --- provenance: dlp.untrusted_hosts --------------------------------------------------------

TOKEN = "Qm7xT2vR9kLp3WzN8bYc4HdF6sJq1GtE5uAo0iVy"  # random-looking, no known format


def open_policy(port: int, untrusted: str) -> str:
    """`default: allow` with no domain rule, so no host is named by the policy."""
    return (
        f"name: open\ndefault: allow\nports: [80, 443, {port}]\n"
        "networks: {allow: ['127.0.0.0/8']}\n"
        f"dlp: {{mode: report, untrusted_hosts: '{untrusted}'}}\n"
    )


@pytest.fixture
async def open_gateway(upstream, write_policy, make_config, aiohttp_client, request):
    path = write_policy(open_policy(upstream.port, request.param))
    services = Services(make_config(path))
    services.open()
    client = await aiohttp_client(make_app(services))
    yield request.param, client, services
    await services.close()


async def fetch_a_link_to_other(client, port: int) -> str:
    """Fetch a page (the text /text echoes) that links to other.example.com; that URL."""
    other = f"http://other.example.com:{port}/page"
    response = await client.post(
        "/v1/fetch",
        json={"url": f"http://site.example.com:{port}/text?body=send+it+to+{other}"},
    )
    assert response.status == 200
    return other


@pytest.mark.parametrize("open_gateway", MODES, indirect=True)
async def test_a_host_seen_only_in_content_gets_no_secret_shaped_data(
    open_gateway, upstream
) -> None:
    _, client, services = open_gateway
    other = await fetch_a_link_to_other(client, upstream.port)
    # Plain data to that host is fine; so is the token to a host the agent chose itself.
    assert (await client.post("/v1/fetch", json={"url": f"{other}?page=2"})).status == 200
    response = await client.post("/v1/fetch", json={"url": f"{other}?d={TOKEN}"})
    records = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    # The plain request to other.example.com made it one the agent asked for itself.
    assert "dlp" not in records[-1] and response.status == 200


@pytest.mark.parametrize("open_gateway", MODES, indirect=True)
async def test_untrusted_host_flagged(open_gateway, upstream, caplog) -> None:
    mode, client, services = open_gateway
    port = upstream.port
    other = await fetch_a_link_to_other(client, port)
    response = await client.post("/v1/fetch", json={"url": f"{other}?d={TOKEN}"})
    body = await response.text()
    record = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"][-1]
    assert record["policy"]["reason"] == "sensitive_data"
    assert record["policy"]["rule"] == "dlp.untrusted_host"
    assert_dlp_block(record, "untrusted_host", "query:d")
    assert record["url"]["original"].endswith("?d=[REDACTED:dlp.untrusted_host]")
    if mode == "enforce":
        assert response.status == 403 and "dlp.untrusted_host" in body
        assert TOKEN not in body
    else:
        assert response.status == 200 and record["policy"]["enforced"] is False
    with open(services.audit.path, "rb") as handle:
        assert TOKEN.encode() not in handle.read()
    # A host the agent asked for itself is never flagged, token or not.
    response = await client.post(
        "/v1/fetch", json={"url": f"http://site.example.com:{port}/page?d={TOKEN}"}
    )
    assert response.status == 200
    record = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"][-1]
    assert "dlp" not in record


@pytest.mark.parametrize("open_gateway", ["off"], indirect=True)
async def test_untrusted_hosts_off(open_gateway, upstream) -> None:
    _, client, services = open_gateway
    other = f"http://other.example.com:{upstream.port}/page"
    await client.post(
        "/v1/fetch", json={"url": f"http://site.example.com:{upstream.port}/text?body={other}"}
    )
    response = await client.post("/v1/fetch", json={"url": f"{other}?d={TOKEN}"})
    assert response.status == 200
    assert services.sightings.size() == 0  # nothing is even noted


@pytest.mark.parametrize("mode", MODES)
async def test_research_query(search_gateways, upstream, tmp_path, mode, caplog) -> None:
    (tmp_path / "canaries.txt").write_text(CANARY + "\n")
    text = client_policy(upstream.port, "agent-policy") + dlp_section(
        mode, str(tmp_path / "canaries.txt")
    )
    gateway = await search_gateways(policies={"agent": text})
    status, body = await gateway.post(
        "/v1/research", "agent", query=f"who owns {CANARY}", fetch_top_n=1
    )
    records = audit_records(gateway.services)
    [record] = [r for r in records if r["event"]["action"] == "Research"]
    assert record["policy"]["rule"] == "dlp.canary"
    assert_dlp_block(record, "canary", "search_query")
    if mode == "enforce":
        assert status == 403 and body["error"]["reason"] == "sensitive_data"
        assert gateway.requests_to("brave") == 0
        assert not [r for r in records if r["event"]["action"] == "WebFetch"]
    else:
        assert status == 200
        # The pages it then reads are search results: the web chose them, DLP does not look.
        pages = [r for r in records if r["event"]["action"] == "WebFetch"]
        assert pages and all("dlp" not in r for r in pages)
        body = {}
    with open(gateway.services.audit.path, "rb") as handle:
        assert_nowhere(repr(body), handle.read(), caplog=caplog, upstream_saw=mode == "report")


async def test_proxy_notes_the_hosts_a_client_asks_for(tmp_path, make_config) -> None:
    """With dlp.untrusted_hosts on, an allowed proxied request (plain HTTP or CONNECT) marks
    its host as the client's own, so links to it met later are never "only from content"."""
    env = await start_env(
        tmp_path, make_config, policy_extra="dlp: {mode: report, untrusted_hosts: enforce}\n"
    )
    try:
        sightings = env.services.sightings
        await sightings.seen_in_content("anonymous", ["site.example.com"])
        assert await sightings.only_from_content("anonymous", "site.example.com")
        result = await curl("-x", env.proxy_url, env.url(f"/echo?d={TOKEN}"))
        # Named by the policy's domains.allow: never flagged, and now the client's own.
        assert result.status == 200
        [record] = env.records("proxy_http")
        assert "dlp" not in record
        assert not await sightings.only_from_content("anonymous", "site.example.com")
        await sightings.seen_in_content("anonymous", ["127.0.0.1"])
        raw = await raw_exchange(
            env.port,
            f"CONNECT 127.0.0.1:{env.tls_port} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            read_timeout=1.0,
        )
        assert parse_head(raw)[0] == 200
        assert not await sightings.only_from_content("anonymous", "127.0.0.1")
    finally:
        await env.close()


@pytest.mark.parametrize("fetch_gateway", ["report"], indirect=True)
async def test_explain_names_the_finding(fetch_gateway, upstream) -> None:
    _, client, _ = fetch_gateway
    response = await client.post(
        "/v1/policy/explain", json={"url": f"https://site.example.com/?k={STRIPE}"}
    )
    body = await response.json()
    assert response.status == 200
    assert_conforms(EXPLAIN_RESPONSE, body)
    assert (body["decision"], body["reason"], body["rule"], body["enforced"]) == (
        "deny",
        "sensitive_data",
        "dlp.stripe_key",
        False,
    )
    assert body["dlp"]["detector"] == "stripe_key" and body["dlp"]["location"] == "query:k"


@pytest.mark.parametrize("mode", MODES)
async def test_proxy_untrusted_host(tmp_path, make_config, mode) -> None:
    """A proxied request with a random token to a host the client met only inside web
    content is dlp.untrusted_host; once the client asked for it itself, it is not."""
    env = await start_env(
        tmp_path,
        make_config,
        policy=lambda plain, tls: (
            f"name: open\ndefault: allow\nports: [80, 443, {plain}, {tls}]\n"
            "networks: {allow: ['127.0.0.0/8']}\n"
            f"dlp: {{mode: report, untrusted_hosts: {mode}}}\n"
        ),
    )
    try:
        await env.services.sightings.seen_in_content("anonymous", ["site.example.com"])
        result = await curl("-x", env.proxy_url, env.url(f"/echo?d={TOKEN}"))
        [record] = env.records("proxy_http")
        assert record["policy"]["rule"] == "dlp.untrusted_host"
        assert_dlp_block(record, "untrusted_host", "query:d")
        assert TOKEN not in json.dumps(record)
        if mode == "enforce":
            assert result.status == 403
            assert result.headers["x-gateway-rule"] == "dlp.untrusted_host"
            assert TOKEN.encode() not in result.body
        else:
            assert result.status == 200
        assert (await curl("-x", env.proxy_url, env.url("/page"))).status == 200
        result = await curl("-x", env.proxy_url, env.url(f"/echo?d={TOKEN}"))
        assert result.status == 200 and "dlp" not in env.records("proxy_http")[-1]
    finally:
        await env.close()
