"""The policy's `proxy_limits` on the forward proxy, with curl against a loopback upstream: a
plain-HTTP response's content type judged on its head (nothing of the body relayed when it is
refused, report mode relaxing it), its bytes capped as they stream; and the CONNECT port rule
of the gateway configuration, decided by the engine like every other rule."""

from __future__ import annotations

import pytest

from gateway.config import ProxyConfig
from tests.server.proxy.env import curl, parse_head, start_env
from tests.server.proxy.test_tunnel import open_tunnel


async def through_proxy(tmp_path, make_config, extra: str, *paths: str):
    """curl each path through a proxy whose policy adds `extra`; the results, and the
    proxy_http records once the proxy is closed."""
    env = await start_env(tmp_path, make_config, policy_extra=extra)
    try:
        results = [await curl("-x", env.proxy_url, env.url(path)) for path in paths]
    finally:
        await env.close()
    return (*results, env.records("proxy_http"))


async def test_a_content_type_outside_proxy_limits_is_refused_on_the_head(
    tmp_path, make_config
) -> None:
    image, page, records = await through_proxy(
        tmp_path, make_config, "proxy_limits: {content_types: [text/*]}\n", "/image", "/page"
    )
    assert image.status == 403 and b"PNG" not in image.body
    assert image.headers["x-gateway-reason"] == "content_type_not_allowed"
    assert image.headers["x-gateway-rule"] == "proxy_limits.content_types"
    assert b"image/png" in image.body and b"proxy_limits.content_types" in image.body
    assert page.status == 200 and page.body == b"hello through the proxy"
    refused, allowed = records
    assert refused["event"]["type"] == ["denied"]
    assert (refused["policy"]["reason"], refused["policy"]["rule"]) == (
        "content_type_not_allowed",
        "proxy_limits.content_types",
    )
    assert refused["destination"]["domain"] == "site.example.com"
    assert allowed["policy"]["decision"] == "allow"


async def test_report_mode_relaxes_the_proxied_content_type(tmp_path, make_config) -> None:
    extra = "mode: report\nproxy_limits: {content_types: [text/*]}\n"
    image, records = await through_proxy(tmp_path, make_config, extra, "/image")
    assert image.status == 200 and image.body.startswith(b"\x89PNG")
    [record] = records
    assert record["event"]["type"] == ["allowed"]
    assert record["policy"] | {"name": None, "sha256": None} == {
        "name": None,
        "sha256": None,
        "decision": "deny",
        "reason": "content_type_not_allowed",
        "rule": "proxy_limits.content_types",
        "enforced": False,
    }


async def test_a_content_length_past_the_cap_is_refused_before_the_body(
    tmp_path, make_config
) -> None:
    big, page, records = await through_proxy(
        tmp_path, make_config, "proxy_limits: {max_response_bytes: 1000}\n", "/big", "/page"
    )
    assert big.status == 502 and b"bbbb" not in big.body
    assert big.headers["x-gateway-reason"] == "response_too_large"
    assert big.headers["x-gateway-rule"] == "proxy_limits.max_response_bytes"
    assert page.status == 200
    refused, allowed = records
    assert refused["error"]["code"] == "response_too_large"
    assert "proxy_limits.max_response_bytes (1000)" in refused["error"]["message"]
    assert refused["policy"]["rule"] == "domains.allow[0]"  # the destination was allowed
    assert allowed["event"]["outcome"] == "success"


async def test_a_streamed_body_past_the_cap_is_cut_and_the_cut_recorded(
    tmp_path, make_config
) -> None:
    cut, page, records = await through_proxy(
        tmp_path, make_config, "proxy_limits: {max_response_bytes: 12}\n", "/chunked", "/page"
    )
    assert cut.status == 200 and cut.code != 0  # the head went out; the body never ended
    assert len(cut.body) <= 12 and b"part2" not in cut.body
    assert page.status == 502  # Content-Length 23 > 12: refused on its head
    started, ended = records[:2]
    assert started["event"]["outcome"] == "success"
    assert ended["trace"]["id"] == started["trace"]["id"] == started["event"]["id"]
    assert ended["event"]["id"] != started["event"]["id"]
    assert ended["event"]["outcome"] == "failure" and ended["error"]["code"] == "response_too_large"
    assert ended["http"]["response"] == {"status_code": 200, "bytes": 12}


async def test_without_proxy_limits_nothing_is_capped(tmp_path, make_config) -> None:
    image, chunked, records = await through_proxy(
        tmp_path, make_config, "proxy_limits: {max_response_bytes: null}\n", "/image", "/chunked"
    )
    assert image.status == 200 and chunked.body == b"part0;part1;part2;part3;part4;"


@pytest.mark.parametrize("mode", ["enforce", "report"])
async def test_connect_ports_are_the_engines_rule(tmp_path, make_config, mode) -> None:
    env = await start_env(
        tmp_path,
        make_config,
        policy_extra=f"mode: {mode}\n",
        proxy=ProxyConfig(connect_ports=(443,)),
    )
    try:
        env.proxy.proxy_config = ProxyConfig(connect_ports=(443,), require_tls=False)
        reader, writer, head = await open_tunnel(env, f"site.example.com:{env.tls_port}")
        status, headers, _ = parse_head(head)
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        writer.close()
    finally:
        await env.close()
    [record] = env.records("proxy_connect")
    assert record["policy"]["reason"] == "port_not_allowed"
    assert record["policy"]["rule"] == "proxy.connect_ports"
    if mode == "enforce":
        assert status == 403 and headers["x-gateway-rule"] == "proxy.connect_ports"
        text = body.decode()
        assert "by the gateway configuration (proxy.connect_ports" in text
        assert "by policy" not in text
        assert record["policy"]["enforced"] is True
    else:  # report mode lets the tunnel open and records the would-be refusal
        assert status == 200
        assert record["policy"]["enforced"] is False and record["event"]["type"] == ["allowed"]
