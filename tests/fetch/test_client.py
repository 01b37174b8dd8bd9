"""The Fetcher against a hostile upstream on loopback, with injected DNS answers; every\nresponse read once, by the strict reader: refusals carry its reason, HEAD responses are\nframed by the request, clean connections are reused."""

from __future__ import annotations

import hashlib
import ipaddress
import tracemalloc

import pytest

from gateway.errors import (
    InvalidRequestError,
    PolicyDeniedError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.fetch.client import Fetcher, FetchOptions
from gateway.fetch.resolver import parse_static_hosts
from gateway.policy.engine import Reason, decide_url
from gateway.policy.hints import refusal_text
from gateway.policy.model import Limits, Timeouts
from tests.policy.conftest import make_policy
from tests.upstream import PAGE, bombs, make_upstream
from tests.wire.test_http1 import fetch_policy, response, scripted


@pytest.fixture
async def upstream(aiohttp_server):
    return await aiohttp_server(make_upstream(), host="127.0.0.1")


@pytest.fixture
def policy(upstream):
    return make_policy(
        allow=[".example.com"],
        ports=(80, 443, upstream.port),
        net_allow=["127.0.0.0/8"],
        timeouts=Timeouts(connect=2, read=1, total=2.5),
        limits=Limits(max_response_bytes=5_000_000),
        max_redirects=5,
    )


@pytest.fixture
async def fetcher():
    hosts = parse_static_hosts(
        {
            "site.example.com": ["127.0.0.1"],
            "other.example.com": ["127.0.0.1"],
            "internal.example.com": ["10.0.0.5"],
            "metadata.example.com": ["169.254.169.254"],
            "mixed.example.com": ["127.0.0.1", "10.0.0.5"],
        }
    )
    f = Fetcher(static_hosts=hosts)
    yield f
    await f.close()


def url(upstream, path: str, host: str = "site.example.com") -> str:
    return f"http://{host}:{upstream.port}{path}"


async def fetch(fetcher, policy, address: str, **options):
    decision, target = decide_url(policy, address)
    assert decision.allowed, decision
    return await fetcher.fetch(policy, target, FetchOptions(**options))


async def test_fetch_page(fetcher, policy, upstream) -> None:
    result = await fetch(fetcher, policy, url(upstream, "/page"))
    assert result.status == 200
    assert result.body == PAGE
    assert result.body_sha256 == hashlib.sha256(PAGE).hexdigest()
    assert result.ip == "127.0.0.1"
    assert result.content_type.startswith("text/html")


async def test_agent_headers_never_forwarded_and_user_agent_names_gateway(
    fetcher, policy, upstream
) -> None:
    result = await fetch(fetcher, policy, url(upstream, "/echo-headers"))
    import orjson

    sent = {k.lower(): v for k, v in orjson.loads(result.body).items()}
    assert "agent-egress-gateway" in sent["user-agent"]
    assert "authorization" not in sent and "cookie" not in sent
    assert sent["accept-encoding"] == "gzip, deflate, br"
    assert sent["host"] == f"site.example.com:{upstream.port}"


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/gzip", b"compressed page"), ("/deflate", b"deflated text"), ("/br", b"brotli text")],
)
async def test_content_codings_decoded(fetcher, policy, upstream, path, expected) -> None:
    result = await fetch(fetcher, policy, url(upstream, path))
    assert expected in result.body
    assert result.body_sha256 == hashlib.sha256(result.body).hexdigest()


@pytest.mark.parametrize("path", ["/gzip-bomb", "/br-bomb"])
async def test_decompression_bombs_cost_a_few_megabytes(fetcher, policy, upstream, path) -> None:
    bombs()  # compressed before measuring
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLargeError):
            await fetch(fetcher, policy, url(upstream, path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The cap is 5 MB; the body parts plus one slice may be held, never the 100 MB.
    assert peak < 20_000_000


@pytest.mark.parametrize(
    ("path", "fragment"), [("/stacked", "stacked"), ("/unknown-coding", "unsupported")]
)
async def test_stacked_and_unknown_codings_are_upstream_errors(
    fetcher, policy, upstream, path, fragment
) -> None:
    with pytest.raises(UpstreamError, match=fragment):
        await fetch(fetcher, policy, url(upstream, path))


async def test_endless_body_is_cut_at_the_cap(fetcher, policy, upstream) -> None:
    with pytest.raises(ResponseTooLargeError):
        await fetch(fetcher, policy, url(upstream, "/endless"))


async def test_declared_length_over_cap_refused_before_reading(fetcher, policy, upstream) -> None:
    with pytest.raises(ResponseTooLargeError, match="declares"):
        await fetch(fetcher, policy, url(upstream, "/sized/6000000"))


async def test_slow_sender_hits_total_timeout(fetcher, policy, upstream) -> None:
    with pytest.raises(UpstreamTimeoutError):
        await fetch(fetcher, policy, url(upstream, "/slow"))


async def test_stalled_upstream_hits_read_timeout(fetcher, policy, upstream) -> None:
    with pytest.raises(UpstreamTimeoutError):
        await fetch(fetcher, policy, url(upstream, "/stall"))


async def test_the_read_deadline_runs_between_reads(fetcher, policy, upstream) -> None:
    # /slow sends a byte every 0.2 s: each read moves the 1 s read deadline on, so only the
    # total deadline ends it; /stall sends nothing after the request: the read deadline does.
    with pytest.raises(UpstreamTimeoutError, match="timeouts.total"):
        await fetch(fetcher, policy, url(upstream, "/slow"))
    with pytest.raises(UpstreamTimeoutError, match=r"timeouts\.read"):
        await fetch(fetcher, policy, url(upstream, "/stall"))


@pytest.mark.parametrize(
    "headers",
    [{"X-Key": "a\r\nInjected: 1"}, {"X-Key": "a\nb"}, {"Bad Name": "v"}, {"X-Key": "a\0"}],
    ids=["crlf", "lf", "space-in-name", "nul"],
)
async def test_a_malformed_operator_header_is_refused_before_sending(
    fetcher, policy, upstream, headers
) -> None:
    with pytest.raises(InvalidRequestError, match="malformed"):
        await fetch(fetcher, policy, url(upstream, "/echo-headers"), headers=headers)
    assert fetcher.pool(policy) is None or fetcher.pool(policy).idle_count() == 0


async def test_operator_headers_replace_the_gateways_own(fetcher, policy, upstream) -> None:
    headers = {"accept": "application/json", "X-Api-Key": "k-123"}
    result = await fetch(fetcher, policy, url(upstream, "/echo-headers"), headers=headers)
    import orjson

    sent = {k.lower(): v for k, v in orjson.loads(result.body).items()}
    assert sent["accept"] == "application/json" and sent["x-api-key"] == "k-123"
    assert "agent-egress-gateway" in sent["user-agent"]


async def test_lying_content_length_is_upstream_error(fetcher, policy, upstream) -> None:
    with pytest.raises(UpstreamError):
        await fetch(fetcher, policy, url(upstream, "/lying-length"))


@pytest.mark.parametrize("path", ["/huge-header", "/many-headers"])
async def test_header_caps(fetcher, policy, upstream, path) -> None:
    with pytest.raises(UpstreamError):
        await fetch(fetcher, policy, url(upstream, path))


async def test_image_is_refused_by_content_type(fetcher, policy, upstream) -> None:
    with pytest.raises(PolicyDeniedError) as info:
        await fetch(fetcher, policy, url(upstream, "/image"))
    assert info.value.decision.reason is Reason.CONTENT_TYPE_NOT_ALLOWED
    assert info.value.decision.rule == "limits.content_types"


async def test_upstream_error_status_is_returned(fetcher, policy, upstream) -> None:
    result = await fetch(fetcher, policy, url(upstream, "/status/404"))
    assert result.status == 404


@pytest.mark.parametrize(
    ("host", "reason", "rule"),
    [
        ("internal.example.com", Reason.PRIVATE_ADDRESS, "networks.block_private"),
        ("metadata.example.com", Reason.METADATA_ADDRESS, "networks.metadata"),
        ("mixed.example.com", Reason.PRIVATE_ADDRESS, "networks.block_private"),
    ],
)
async def test_resolved_addresses_are_checked(
    fetcher, policy, upstream, host, reason, rule
) -> None:
    with pytest.raises(PolicyDeniedError) as info:
        await fetch(fetcher, policy, url(upstream, "/page", host=host))
    assert (info.value.decision.reason, info.value.decision.rule) == (reason, rule)
    # What the agent reads: the refusal text, which never names the address refused.
    assert info.value.message == refusal_text(info.value.decision)
    assert "10.0.0.5" not in info.value.message and "169.254" not in info.value.message


async def test_unresolvable_name_is_unreachable(fetcher, policy, upstream) -> None:
    with pytest.raises(UpstreamUnreachableError):
        await fetch(fetcher, policy, url(upstream, "/page", host="nowhere.example.com"))


async def test_refused_connection_is_unreachable(fetcher, policy, upstream) -> None:
    closed_port_policy = make_policy(allow=[".example.com"], ports=(1,), net_allow=["127.0.0.0/8"])
    with pytest.raises(UpstreamUnreachableError):
        await fetch(fetcher, closed_port_policy, "http://site.example.com:1/")


async def test_redirect_chain_followed_and_recorded(fetcher, policy, upstream) -> None:
    result = await fetch(fetcher, policy, url(upstream, "/chain/3"))
    assert result.body == b"end of chain"
    assert [h.status for h in result.trace.redirects] == [302, 302, 302]
    assert str(result.target.url).endswith("/chain/0")
    assert all(h.decision.allowed for h in result.trace.redirects)


async def test_redirect_loop_hits_the_cap(fetcher, policy, upstream) -> None:
    with pytest.raises(PolicyDeniedError) as info:
        await fetch(fetcher, policy, url(upstream, "/loop"))
    assert info.value.decision.reason is Reason.REDIRECT_LIMIT
    assert len(info.value.decision.rule) and info.value.decision.rule == "redirects.max"


@pytest.mark.parametrize(
    ("to", "reason", "rule"),
    [
        ("http://10.0.0.1/", Reason.IP_LITERAL_NOT_ALLOWED, "default"),
        (
            "http://internal.example.com:{port}/page",
            Reason.PRIVATE_ADDRESS,
            "networks.block_private",
        ),
        ("http://169.254.169.254/latest/meta-data/", Reason.IP_LITERAL_NOT_ALLOWED, "default"),
        ("http://evil.test/", Reason.DOMAIN_NOT_ALLOWED, "default"),
        ("gopher://site.example.com/", Reason.SCHEME_NOT_ALLOWED, "schemes"),
    ],
)
async def test_redirect_to_forbidden_places_is_refused(
    fetcher, policy, upstream, to, reason, rule
) -> None:
    target = to.format(port=upstream.port)
    with pytest.raises(PolicyDeniedError) as info:
        await fetch(fetcher, policy, url(upstream, f"/redirect?to={target}"))
    assert (info.value.decision.reason, info.value.decision.rule) == (reason, rule)


async def test_two_locations_is_upstream_error(fetcher, policy, upstream) -> None:
    with pytest.raises(UpstreamError, match="Location"):
        await fetch(fetcher, policy, url(upstream, "/two-locations"))


async def test_ip_literal_target_checked_before_connecting(fetcher, upstream) -> None:
    policy = make_policy(
        net_allow=["127.0.0.0/8"], net_deny=["127.0.0.0/24"], ports=(upstream.port,)
    )
    decision, target = decide_url(policy, f"http://127.0.0.1:{upstream.port}/page")
    assert decision.allowed  # networks.allow admits the literal at step 3...
    with pytest.raises(PolicyDeniedError) as info:  # ...and networks.deny refuses the address
        await fetcher.fetch(policy, target)
    assert (info.value.decision.reason, info.value.decision.rule) == (
        Reason.NETWORK_DENIED,
        "networks.deny[0]",
    )


async def test_own_address_is_refused(upstream) -> None:
    own = ((ipaddress.ip_network("127.0.0.1/32"), upstream.port),)
    f = Fetcher(
        static_hosts=parse_static_hosts({"site.example.com": ["127.0.0.1"]}), own_addresses=own
    )
    policy = make_policy(allow=[".example.com"], ports=(upstream.port,), net_allow=["127.0.0.0/8"])
    try:
        with pytest.raises(PolicyDeniedError) as info:
            await fetch(f, policy, url(upstream, "/page"))
        assert info.value.decision.reason is Reason.OWN_ADDRESS
    finally:
        await f.close()


async def test_keep_alive_connections_are_reused(fetcher, policy, upstream) -> None:
    for _ in range(5):
        result = await fetch(fetcher, policy, url(upstream, "/text"))
        assert result.status == 200
    pool = fetcher.pool(policy)
    assert pool is not None and pool.idle_count() == 1  # one kept connection served all five


async def test_pools_are_not_shared_across_policies(fetcher, policy, upstream) -> None:
    other = make_policy(
        allow=["site.example.com"], ports=(upstream.port,), net_allow=["127.0.0.0/8"], name="other"
    )
    await fetch(fetcher, policy, url(upstream, "/text"))
    await fetch(fetcher, other, url(upstream, "/text"))
    assert fetcher.pool_count() == 2
    assert fetcher.pool(policy) is not fetcher.pool(other)
    assert fetcher.pool(policy).idle_count() == fetcher.pool(other).idle_count() == 1


async def test_an_error_after_a_redirect_names_the_hop(fetcher, policy, upstream) -> None:
    # Hop 1 goes to a port where nothing listens: the error says which hop, and to which host.
    closed = make_policy(
        allow=[".example.com"], ports=(upstream.port, 1), net_allow=["127.0.0.0/8"]
    )
    target = "http://other.example.com:1/page?token=s3cret"
    with pytest.raises(UpstreamUnreachableError) as info:
        await fetch(fetcher, closed, url(upstream, f"/redirect?to={target}"))
    assert info.value.message.startswith("redirect hop 1 (to other.example.com): ")
    assert "s3cret" not in info.value.message


async def test_a_denied_hop_is_named_in_the_refusal(fetcher, policy, upstream) -> None:
    with pytest.raises(PolicyDeniedError) as info:
        await fetch(fetcher, policy, url(upstream, "/redirect?to=http://evil.test/"))
    assert info.value.message.startswith("redirect hop 1 (to evil.test): domain not allowed")
    assert info.value.rule == "default"


async def test_a_response_too_large_names_its_rule(fetcher, policy, upstream) -> None:
    with pytest.raises(ResponseTooLargeError) as info:
        await fetch(fetcher, policy, url(upstream, "/gzip-bomb"))
    assert (info.value.reason, info.value.rule) == (
        "response_too_large",
        "limits.max_response_bytes",
    )
    assert info.value.to_dict()["rule"] == "limits.max_response_bytes"


# --- each response read once, by the strict reader (wire/http1.py) -----------------------


async def fetch_twice(reply: bytes, method: str = "GET") -> tuple[list[bytes], int]:
    upstream = scripted(reply, byte_by_byte=False)
    port = await upstream.start()
    fetcher = Fetcher(static_hosts=parse_static_hosts({"site.example.com": ["127.0.0.1"]}))
    policy = fetch_policy(port)
    try:
        _, target = decide_url(policy, f"http://site.example.com:{port}/")
        assert target is not None
        options = FetchOptions(method=method)
        bodies = [(await fetcher.fetch(policy, target, options)).body for _ in range(2)]
        return bodies, upstream.connections
    finally:
        await fetcher.close()
        await upstream.close()


async def test_a_refused_response_fails_with_the_readers_reason() -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\r\n folded\r\n\r\nok"
    with pytest.raises(UpstreamError, match="obs-fold"):
        await fetch_twice(reply)


async def test_a_head_response_has_no_body_whatever_its_length_says() -> None:
    bodies, connections = await fetch_twice(response(b"Content-Length: 100"), method="HEAD")
    assert bodies == [b"", b""]
    assert connections == 1  # nothing was taken for a body: the connection stayed clean


async def test_a_clean_connection_is_reused() -> None:
    bodies, connections = await fetch_twice(response(b"Content-Length: 2", body=b"ok"))
    assert bodies == [b"ok", b"ok"] and connections == 1
