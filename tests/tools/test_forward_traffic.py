"""The forward-traffic use case as the proxy adapter holds it: the machine it makes per
request, the I/O its commands name (host sightings here; the dialling itself:
tests/server/proxy/), the records a ProxyCall builds, and the re-decision after a reload."""

from __future__ import annotations

import hashlib

from gateway.config import ClientLimits
from gateway.fetch.client import Fetcher
from gateway.runtime import ClientIdentity, PolicyState
from gateway.tools import forward
from gateway.tools.forward_flow import Acquire, Answer, CheckProvenance, Send
from gateway.tools.forward_traffic import ForwardTraffic
from gateway.tools.sightings import InMemoryHostSightings
from gateway.wire.request import parse_request_head
from tests.tools.test_forward import AWS_KEY, HIGH_ENTROPY, policy

# --- the use case as the adapter holds it: ForwardTraffic, ProxyCall, Verdict -------------


def _traffic() -> ForwardTraffic:
    return ForwardTraffic(fetcher=Fetcher(), sightings=InMemoryHostSightings())


async def test_a_secret_sent_to_a_host_met_only_in_content_is_refused_through_sightings() -> None:
    traffic = _traffic()
    guarded = policy(
        "dlp: {mode: report, untrusted_hosts: enforce}\n", domains="{}", default="allow"
    )
    who = ClientIdentity("agent", hashlib.sha256(b"t").digest(), guarded, ClientLimits())
    await traffic.sightings.seen_in_content("agent", ["drop.example.org"])
    url = f"http://drop.example.org/?k={HIGH_ENTROPY}"
    flow = traffic.flow(
        parse_request_head(f"GET {url} HTTP/1.1".encode()), None, max_body=10, connect_ports=()
    )
    check = flow.identified(who, guarded, draining=False)
    assert isinstance(check, CheckProvenance) and check.sent == url
    refusal = flow.provenance_checked(await traffic.provenance(check))
    assert isinstance(refusal, Answer) and refusal.reason == "sensitive_data"
    # A host the client asked for itself is marked so, and the request goes on.
    clean = traffic.flow(
        parse_request_head(b"GET http://b.example.org/ HTTP/1.1"),
        None,
        max_body=10,
        connect_ports=(),
    )
    check = clean.identified(who, guarded, draining=False)
    assert isinstance(check, CheckProvenance)
    assert isinstance(clean.provenance_checked(await traffic.provenance(check)), Acquire)
    assert not await traffic.sightings.only_from_content("agent", "b.example.org")
    traffic.close()


def test_a_reload_is_re_decided_with_the_fetchers_own_addresses() -> None:
    traffic = _traffic()
    who = ClientIdentity("agent", hashlib.sha256(b"t").digest(), policy(), ClientLimits())
    flow = traffic.flow(
        parse_request_head(b"GET http://a.example.com/ HTTP/1.1"),
        None,
        max_body=10,
        connect_ports=(),
    )
    assert isinstance(flow.identified(None, policy(), draining=False), Send)
    target = flow.verdict
    assert target is not None
    state = PolicyState(policy(), (who,))
    assert traffic.after_reload(state, who, (target, "93.184.216.34")) is None
    assert traffic.after_reload(state, who, (target, "127.0.0.1")) == "policy_reload"
    traffic.close()


def test_a_call_records_what_dlp_reported_on_a_later_failure() -> None:
    guarded = policy("dlp: {mode: report, body_prefix_bytes: 64}\n")
    call = forward.ProxyCall(
        source=("127.0.0.1", 5000), url="http://a.example.com/x", method="POST"
    )
    call.client_id, call.policy = "agent", guarded
    decision, target = forward.decide_request(guarded, call.url, "POST", [("X-Key", AWS_KEY)])
    verdict = forward.Verdict(guarded, decision, target)
    assert verdict.allowed and verdict.host == "a.example.com"
    call.allowed = verdict
    # A later record of the request (an upstream failure, say) still shows what DLP reported.
    record = call.record(status=502)
    assert record["event"]["action"] == "proxy_http" and record["client"]["id"] == "agent"
    assert record["dlp"]["detector"] == "aws_access_key"
    assert verdict.destination("127.0.0.1") == {
        "domain": "a.example.com",
        "ip": "127.0.0.1",
        "port": 80,
    }
    denied = forward.Verdict(
        policy(), *forward.decide_request(policy(), "http://b.other.org/", "GET", [])
    )
    assert (denied.status, denied.code, denied.rule) == (403, "domain_not_allowed", "default")
    assert denied.message.startswith("refused by the gateway: ")
