"""The resolver against real DNS: `gateway fetch` in a mount namespace whose /etc/resolv.conf
names a scripted DNS server on loopback (tests/dnsserver.py), so every answer goes through
the system resolver (glibc's stub, over UDP) exactly as in production: rebinding between
lookups, CNAME chains, AAAA-only answers, SERVFAIL, NXDOMAIN and a server that never
answers, each refused or failed closed with its reason and on record.

Needs root (the suite runs as root inside `unshare -n`): binding port 53 and `unshare -m`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.conftest import loopback_policy
from tests.dnsserver import AAAA, SERVFAIL, ScriptedDns, Step
from tests.processes import GatewayProcess, free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None,
    reason="needs root, unshare and mount (the suite's network namespace runs as root)",
)

DNS_HOST = "127.53.0.1"
# One attempt, and a resolver timeout longer than the policy's connect timeout: a silent
# server is given up on by the gateway (timeouts.connect), not by glibc.
RESOLV_CONF = f"nameserver {DNS_HOST}\noptions timeout:3 attempts:1\n"
# Silent names asked at once: more than the threads of the event loop's default executor on
# a machine of up to 8 cores, which is where lookups once ran.
SILENT_AT_ONCE = 12

SCRIPT = {
    "rebind.example.com": [Step(("127.0.0.1",)), Step(("10.0.0.5",))],
    "chain.example.com": [Step(cname="hop.example.com")],
    "hop.example.com": [Step(cname="end.example.com")],
    "end.example.com": [Step(("10.1.2.3",))],
    "goodchain.example.com": [Step(cname="good.example.com")],
    "good.example.com": [Step(("127.0.0.1",))],
    "six.example.com": [Step(("fd00::5",))],
    "mixed.example.com": [Step(("127.0.0.1", "10.0.0.5"))],
    "public.example.com": [Step(("93.184.216.34",))],
    "broken.example.com": [Step(rcode=SERVFAIL)],
    "silent.example.com": [Step(silent=True)],
    **{f"s{i}.silent.example.com": [Step(silent=True)] for i in range(SILENT_AT_ONCE)},
}


# Runs its arguments in a new mount namespace whose /etc/resolv.conf is the file in $1.
IN_NAMESPACE = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'


def namespaced(resolv: Path) -> tuple[str, ...]:
    return ("unshare", "-m", "sh", "-c", IN_NAMESPACE, "sh", str(resolv))


class Gateway:
    """`gateway fetch` runs, each in its own mount namespace with the scripted resolv.conf."""

    def __init__(self, tmp_path: Path, port: int) -> None:
        self.tmp_path = tmp_path
        self.port = port
        self.resolv = tmp_path / "resolv.conf"
        self.resolv.write_text(RESOLV_CONF)
        policy = tmp_path / "dns.yaml"
        policy.write_text(
            loopback_policy(port).replace(
                "timeouts: {connect: 2, read: 1, total: 2.5}",
                "timeouts: {connect: 1, read: 2, total: 8}",
            )
        )
        self.audit = tmp_path / "audit" / "dns-test-cli.jsonl"  # gateway fetch: its own chain
        self.policy = policy
        self.config = tmp_path / "gateway.yaml"
        self.config.write_text(
            textwrap.dedent(
                f"""\
                policy: {policy}
                audit: {{path: "{tmp_path / "audit" / "dns-{instance}.jsonl"}"}}
                instance_id: test
                """
            )
        )

    async def fetch(self, host: str, path: str = "/page") -> tuple[int, dict[str, Any]]:
        process = await asyncio.create_subprocess_exec(
            *namespaced(self.resolv),
            sys.executable,
            "-m",
            "gateway",
            "fetch",
            f"http://{host}:{self.port}{path}",
            "--config",
            str(self.config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode in (0, 1), err.decode()
        return process.returncode, orjson.loads(out)

    @contextlib.asynccontextmanager
    async def serving(self, instance: str) -> AsyncIterator[int]:
        """`gateway serve` in its own mount namespace with the scripted resolv.conf; yields
        its forward proxy's port."""
        proxy_port = free_port()
        config = {
            "policy": str(self.policy),
            "audit": {"path": str(self.tmp_path / "audit" / "serve-{instance}.jsonl")},
            "instance_id": instance,
            "listen": {"proxy_port": proxy_port},
        }
        serve = GatewayProcess(self.tmp_path, config, prefix=namespaced(self.resolv))
        await serve.start()
        try:
            yield proxy_port
        finally:
            serve.signal(signal.SIGTERM)
            await serve.wait(20)

    def records(self) -> list[dict[str, Any]]:
        lines = self.audit.read_bytes().splitlines()
        return [r for r in map(orjson.loads, lines) if r["event"]["action"] == "WebFetch"]


@pytest.fixture
async def dns():
    server = ScriptedDns(SCRIPT)
    await server.start(DNS_HOST)
    yield server
    server.close()


@pytest.fixture
def gateway(tmp_path, upstream) -> Gateway:
    return Gateway(tmp_path, upstream.port)


def refusal(body: dict[str, Any]) -> tuple[str, str | None, str | None]:
    error = body["error"]
    return error["code"], error["reason"], error["rule"]


async def test_the_connection_is_pinned_to_the_checked_answer_and_a_rebind_is_refused(
    dns, gateway
) -> None:
    status, body = await gateway.fetch("rebind.example.com")
    assert status == 0, body
    assert body["envelope"]["status"] == 200
    # One lookup decided and connected: a second one would have been answered 10.0.0.5.
    assert dns.count("rebind.example.com") == 1
    assert gateway.records()[0]["destination"]["ip"] == "127.0.0.1"

    status, body = await gateway.fetch("rebind.example.com")  # the name now rebinds
    assert status == 1
    assert refusal(body) == ("policy_denied", "private_address", "networks.block_private")
    assert dns.count("rebind.example.com") == 2
    record = gateway.records()[1]
    assert record["policy"]["reason"] == "private_address"
    assert record["event"]["type"] == ["denied"]


async def test_a_cname_chain_is_decided_by_the_address_it_ends_in(dns, gateway) -> None:
    status, body = await gateway.fetch("chain.example.com")
    assert status == 1
    assert refusal(body) == ("policy_denied", "private_address", "networks.block_private")
    status, body = await gateway.fetch("goodchain.example.com")
    assert status == 0, body
    assert [r["policy"]["decision"] for r in gateway.records()] == ["deny", "allow"]


@pytest.mark.parametrize(
    ("host", "why"),
    [("six.example.com", "an AAAA-only answer"), ("mixed.example.com", "one private address")],
    ids=["aaaa-only", "mixed"],
)
async def test_a_private_answer_is_refused(dns, gateway, host, why) -> None:
    status, body = await gateway.fetch(host)
    assert status == 1, why
    assert refusal(body) == ("policy_denied", "private_address", "networks.block_private")
    if host == "six.example.com":
        assert dns.count(host, AAAA) >= 1
    [record] = gateway.records()
    assert record["policy"]["decision"] == "deny" and record["event"]["type"] == ["denied"]


@pytest.mark.parametrize(
    "host",
    ["broken.example.com", "missing.example.com", "silent.example.com"],
    ids=["servfail", "nxdomain", "never-answers"],
)
async def test_a_failed_lookup_fails_closed(dns, gateway, host) -> None:
    status, body = await gateway.fetch(host)
    assert status == 1
    assert body["error"]["code"] == "upstream_unreachable"
    assert "did not resolve" in body["error"]["message"]
    assert dns.count(host) >= 1  # the system resolver really asked the scripted server
    [record] = gateway.records()
    assert record["error"]["code"] == "upstream_unreachable"
    assert record["event"]["outcome"] == "failure"


async def test_a_public_answer_is_allowed_then_fails_to_connect(dns, gateway) -> None:
    """No public address is reachable from the test's network namespace: the answer passes
    the policy's address check, and the connection then fails."""
    status, body = await gateway.fetch("public.example.com")
    assert status == 1
    assert body["error"]["code"] == "upstream_unreachable"
    [record] = gateway.records()
    assert record["policy"]["decision"] == "allow"
    assert dns.count("public.example.com") == 1


async def test_the_proxy_pins_and_refuses_the_same_way(dns, gateway) -> None:
    """`gateway serve` in the namespace: the forward proxy's plain-HTTP path and CONNECT
    resolve through the same real DNS server and are decided the same way."""
    async with gateway.serving("dns-serve") as proxy_port:
        proxy = f"http://127.0.0.1:{proxy_port}"
        url = f"http://rebind.example.com:{gateway.port}/page"
        async with aiohttp.ClientSession() as session:
            async with session.get(url, proxy=proxy) as first:
                assert first.status == 200
                await first.read()
            assert dns.count("rebind.example.com") == 1
            async with session.get(url, proxy=proxy) as second:  # the pooled connection
                assert second.status == 200
                await second.read()
            assert dns.count("rebind.example.com") == 1  # kept on the checked address
            # Another port is another connection, so another lookup: the rebound answer.
            async with session.get("http://rebind.example.com/", proxy=proxy) as third:
                assert third.status == 403
                assert third.headers["X-Gateway-Reason"] == "private_address"
                assert third.headers["X-Gateway-Rule"] == "networks.block_private"
            assert dns.count("rebind.example.com") == 2
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.write(
            b"CONNECT chain.example.com:443 HTTP/1.1\r\nHost: chain.example.com:443\r\n\r\n"
        )
        answer = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        assert answer.startswith(b"HTTP/1.1 403 ")
        assert b"X-Gateway-Reason: private_address" in answer
        assert b"X-Gateway-Rule: networks.block_private" in answer


async def test_names_that_never_answer_do_not_stall_other_lookups(dns, gateway) -> None:
    """While many lookups wait on a server that never answers (each holding a thread until
    glibc gives up, after the gateway has), a name that does answer is still looked up and
    fetched: lookups run in threads of their own, more than a silent domain's few requests
    can hold."""
    silent = [f"s{i}.silent.example.com" for i in range(SILENT_AT_ONCE)]
    async with gateway.serving("dns-silent") as proxy_port:
        proxy = f"http://127.0.0.1:{proxy_port}"
        async with aiohttp.ClientSession() as session:

            async def get(host: str) -> tuple[int, str]:
                async with session.get(f"http://{host}:{gateway.port}/page", proxy=proxy) as r:
                    return r.status, r.headers.get("X-Gateway-Reason", "")

            stuck = [asyncio.ensure_future(get(host)) for host in silent]
            for _ in range(1000):  # until the DNS server has been asked for every silent name
                if all(dns.count(host) for host in silent):
                    break
                await asyncio.sleep(0.01)
            queued = [host for host in silent if not dns.count(host)]
            assert not queued, f"lookups queued behind silent ones, never asked: {queued}"
            assert await get("good.example.com") == (200, "")
            answers = await asyncio.gather(*stuck)
        assert all(answer == (504, "upstream_timeout") for answer in answers), answers
