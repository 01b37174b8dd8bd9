"""Metrics: audit records become bounded labels; /metrics serves them, with or without a token."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import __version__
from gateway.config import ClientConfig, ServerConfig
from gateway.errors import AuditWriteError
from gateway.metrics import LabelledSeries, Metrics, ObservedAuditLog
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy


@pytest.fixture
async def services(upstream, write_policy, make_config):
    svc = Services(make_config(write_policy(loopback_policy(upstream.port))))
    svc.open()
    yield svc
    await svc.close()


@pytest.fixture
async def client(services, aiohttp_client):
    return await aiohttp_client(make_app(services))


def without_created(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "_created" not in line)


@pytest.mark.parametrize(
    ("buckets", "observations"),
    [
        (None, [(("a", "x"), 1), (("a", "x"), 2.5), (("b", "y"), 1)]),
        ((0.1, 1, 10), [(("a", "x"), v) for v in (0, 0.1, 0.10001, 1, 5, 10, 11, 1e9)]),
        ((256, 1024), [(("b", "y"), 256), (("a", "x"), 1023), (("b", "y"), 2000)]),
    ],
    ids=["counter", "histogram-on-and-past-bounds", "two-series"],
)
def test_labelled_series_expose_what_prometheus_client_does(buckets, observations) -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    ours, theirs = CollectorRegistry(), CollectorRegistry()
    series = LabelledSeries("m", "help", ["k", "v"], buckets=buckets, registry=ours)
    if buckets is None:
        counter = Counter("m", "help", ["k", "v"], registry=theirs)
        for labels, amount in observations:
            series.inc(labels, amount)
            counter.labels(*labels).inc(amount)
    else:
        histogram = Histogram("m", "help", ["k", "v"], buckets=buckets, registry=theirs)
        for labels, value in observations:
            series.observe(value, labels)
            histogram.labels(*labels).observe(value)
    mine, reference = generate_latest(ours).decode(), generate_latest(theirs).decode()
    assert without_created(mine) == without_created(reference)
    assert mine.count("_created{") == reference.count("_created{") > 0


def test_an_unlabelled_series_shows_before_its_first_observation() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    LabelledSeries("w", "help", buckets=(1, 2), registry=registry)
    assert 'w_bucket{le="+Inf"} 0.0' in generate_latest(registry).decode()


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def decision_labels(text: str) -> dict[tuple[str, str, str, str], float]:
    return {
        (d["tool"], d["decision"], d["reason"], d["client"]): value
        for key, value in samples(text, "gateway_decisions_total").items()
        for d in [dict(key)]
    }


def record(action="WebFetch", decision="allow", reason=None, client="agent", **extra):
    rec = {
        "event": {"action": action, "outcome": "success", "duration_ms": 120},
        "client": {"id": client},
        "policy": {"decision": decision, "reason": reason},
    }
    rec.update(extra)
    return rec


@pytest.mark.parametrize(
    ("rec", "labels"),
    [
        pytest.param(record(), ("WebFetch", "allow", "none", "agent"), id="allowed"),
        pytest.param(
            record(decision="deny", reason="domain_denied"),
            ("WebFetch", "deny", "domain_denied", "agent"),
            id="denied-reason",
        ),
        pytest.param(
            record(client="someone-unconfigured"),
            ("WebFetch", "allow", "none", "anonymous"),
            id="unknown-client-is-anonymous",
        ),
        pytest.param(
            record(client=None), ("WebFetch", "allow", "none", "anonymous"), id="no-client"
        ),
        pytest.param(
            record(reason="https://evil.example/?x=1"),
            ("WebFetch", "allow", "other", "agent"),
            id="unbounded-reason-is-other",
        ),
        pytest.param(
            record(decision="https://evil.example/"),
            ("WebFetch", "other", "none", "agent"),
            id="unbounded-decision-is-other",
        ),
        pytest.param(
            record(error={"code": "upstream_timeout", "message": "x"}),
            ("WebFetch", "allow", "upstream_timeout", "agent"),
            id="error-code-as-reason",
        ),
        pytest.param(
            record(action="proxy_connect"), ("proxy_connect", "allow", "none", "agent"), id="proxy"
        ),
    ],
)
def test_records_become_bounded_labels(rec, labels) -> None:
    metrics = Metrics(instance_id="i", version="v")
    metrics.set_clients(["agent"])
    metrics.observe_record(rec)
    text = metrics.registry_text()
    assert decision_labels(text) == {labels: 1.0}


@pytest.mark.parametrize(
    "rec",
    [
        pytest.param({"event": {"action": "log_start"}}, id="lifecycle"),
        pytest.param({"event": {"action": "https://evil.example/"}}, id="unknown-action"),
        pytest.param({}, id="empty"),
        pytest.param({"event": "not a mapping", "policy": 3}, id="malformed"),
    ],
)
def test_records_that_are_not_decisions_are_not_counted(rec, caplog) -> None:
    metrics = Metrics(instance_id="i", version="v")
    metrics.observe_record(rec)
    assert decision_labels(metrics.registry_text()) == {}


def test_latency_bytes_and_tunnels_from_records() -> None:
    metrics = Metrics(instance_id="i", version="v")
    metrics.observe_record(record(http={"response": {"status_code": 200, "bytes": 5000}}))
    metrics.observe_record(record(action="proxy_connect"))
    metrics.observe_record(record(action="proxy_connect"))
    metrics.observe_record(record(action="tunnel_close"))
    text = metrics.registry_text()
    assert samples(text, "gateway_upstream_response_bytes_sum") == {(("tool", "WebFetch"),): 5000.0}
    assert samples(text, "gateway_tool_duration_seconds_count")[(("tool", "WebFetch"),)] == 1.0
    assert samples(text, "gateway_open_tunnels") == {(): 1.0}


def test_redis_gauge_only_with_shared_state() -> None:
    assert "gateway_redis_up" not in Metrics(instance_id="i", version="v").registry_text()
    shared = Metrics(instance_id="i", version="v", shared_state=True)
    shared.set_redis_up(False)
    assert samples(shared.registry_text(), "gateway_redis_up") == {(): 0.0}


def test_each_process_has_its_own_registry() -> None:
    one, two = Metrics(instance_id="a", version="v"), Metrics(instance_id="b", version="v")
    one.observe_record(record())
    assert decision_labels(two.registry_text()) == {}


def test_observed_audit_log_times_writes_and_counts_failures(tmp_path) -> None:
    metrics = Metrics(instance_id="i", version="v")
    log = ObservedAuditLog(str(tmp_path / "a.jsonl"), metrics=metrics, instance_id="i", version="v")
    log.open()
    log.append(record())
    log.close()
    with pytest.raises(AuditWriteError):
        log.append(record())
    text = metrics.registry_text()
    assert samples(text, "gateway_audit_write_seconds_count") == {(): 1.0}
    assert samples(text, "gateway_audit_write_failures_total") == {(): 1.0}
    assert sum(decision_labels(text).values()) == 1.0


async def test_metrics_endpoint_reflects_decisions(client, upstream) -> None:
    allowed = f"http://site.example.com:{upstream.port}/text"
    denied = f"http://blocked.example.com:{upstream.port}/text"
    assert (await client.post("/v1/fetch", json={"url": allowed})).status == 200
    assert (await client.post("/v1/fetch", json={"url": denied})).status == 403
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    text = await response.text()
    assert decision_labels(text) == {
        ("WebFetch", "allow", "none", "anonymous"): 1.0,
        ("WebFetch", "deny", "domain_denied", "anonymous"): 1.0,
    }
    assert samples(text, "gateway_info") == {
        (("instance", "test-instance"), ("version", __version__)): 1.0
    }
    routes = {
        dict(k)["route"] for k in samples(text, "gateway_http_request_duration_seconds_count")
    }
    assert routes == {"/v1/fetch"}
    # The /metrics request itself is in flight while it renders.
    assert samples(text, "gateway_in_flight_requests") == {(): 1.0}
    assert "example.com" not in text and "/text" not in text


async def test_unmatched_paths_share_one_label(client) -> None:
    for path in ("/nope", "/a/b/c", "/%2e%2e"):
        assert (await client.get(path)).status == 404
    text = await (await client.get("/metrics")).text()
    counts = samples(text, "gateway_http_request_duration_seconds_count")
    assert counts == {(("route", "unmatched"), ("status", "4xx")): 3.0}


TOKEN = "metrics-test-token"


@pytest.mark.parametrize(
    ("need_token", "authorization", "status"),
    [
        pytest.param(False, None, 200, id="public-by-default"),
        pytest.param(True, None, 401, id="token-required"),
        pytest.param(True, "Bearer wrong", 401, id="wrong-token"),
        pytest.param(True, f"Bearer {TOKEN}", 200, id="right-token"),
    ],
)
async def test_metrics_need_token(
    need_token, authorization, status, upstream, write_policy, make_config, aiohttp_client
) -> None:
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        clients=(ClientConfig("agent", hashlib.sha256(TOKEN.encode()).hexdigest()),),
        server=ServerConfig(metrics_need_token=need_token),
    )
    services = Services(config)
    services.open()
    try:
        client = await aiohttp_client(make_app(services))
        headers = {"Authorization": authorization} if authorization else {}
        response = await client.get("/metrics", headers=headers)
        assert response.status == status
        if status == 200:
            assert "gateway_decisions" in await response.text()
    finally:
        await services.close()


async def test_client_labels_follow_reloads(services) -> None:
    services.metrics.observe_record(record(client="agent"))
    config = replace(
        services.config,
        clients=(ClientConfig("agent", hashlib.sha256(TOKEN.encode()).hexdigest()),),
    )
    assert services.reload(config)
    services.metrics.observe_record(record(client="agent"))
    assert decision_labels(services.metrics.registry_text()) == {
        ("WebFetch", "allow", "none", "anonymous"): 1.0,
        ("WebFetch", "allow", "none", "agent"): 1.0,
    }
    assert samples(services.metrics.registry_text(), "gateway_policy_reloads_total") == {
        (("outcome", "success"),): 1.0
    }
