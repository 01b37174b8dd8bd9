"""The forward-traffic use case as the proxy adapter holds it: a ProxyCall decided and
recorded through ForwardTraffic, the Verdicts it hands back, and the response head judged
only where the policy lists types (the dialling itself: tests/server/proxy/)."""

from __future__ import annotations

from gateway.fetch.client import Fetcher
from gateway.tools import forward
from gateway.tools.forward_traffic import ForwardTraffic
from gateway.tools.sightings import InMemoryHostSightings
from tests.tools.test_forward import AWS_KEY, policy

# --- the use case as the adapter holds it: ForwardTraffic, ProxyCall, Verdict -------------


def _traffic() -> ForwardTraffic:
    return ForwardTraffic(fetcher=Fetcher(), sightings=InMemoryHostSightings())


async def test_a_call_is_decided_and_recorded_through_the_use_case() -> None:
    traffic = _traffic()
    guarded = policy("dlp: {mode: report, body_prefix_bytes: 64}\n")
    call = forward.ProxyCall(
        source=("127.0.0.1", 5000), url="http://a.example.com/x", method="POST"
    )
    call.client_id, call.policy = "agent", guarded
    verdict = await traffic.request(call, [("X-Key", AWS_KEY)])
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
    # The body is judged once; an unchanged verdict is handed back as it was.
    assert traffic.body(verdict, b"plain") is verdict
    traffic.close()


async def test_a_refusal_says_what_the_answer_carries() -> None:
    traffic = _traffic()
    call = forward.ProxyCall(source=None, url="http://[bad/", method="GET")
    call.policy = policy()
    invalid = await traffic.request(call, [])
    assert (invalid.allowed, invalid.status, invalid.code) == (False, 400, "invalid_url")
    assert invalid.destination(None) is None
    call = forward.ProxyCall(source=None, url="http://b.other.org/", method="GET")
    call.policy = policy()
    denied = await traffic.request(call, [])
    assert (denied.status, denied.code, denied.rule) == (403, "domain_not_allowed", "default")
    assert denied.message.startswith("refused by the gateway: ")
    connect = forward.ProxyCall(source=None, url="a.example.com", method="CONNECT")
    connect.policy = policy()
    assert await traffic.connect(connect, (443,)) is None  # no port: not host:port
    traffic.close()


def test_a_content_type_is_judged_only_when_the_policy_lists_types() -> None:
    traffic = _traffic()
    open_policy = forward.Verdict(
        policy(), forward.decide_request(policy(), "http://a.example.com/", "GET", [])[0], None
    )
    assert traffic.response(open_policy, [(b"Content-Type", b"image/png")]) is open_policy
    listed = policy("proxy_limits: {content_types: [text/*]}\n")
    decision, target = forward.decide_request(listed, "http://a.example.com/", "GET", [])
    verdict = forward.Verdict(listed, decision, target)
    assert not traffic.response(verdict, [(b"content-type", b"image/png")]).allowed
    assert traffic.response(verdict, [(b"Content-Type", b"text/html")]) is verdict
    traffic.close()
