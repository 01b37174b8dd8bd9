"""Fixtures shared across test packages: a hostile upstream, policies on disk, gateway services."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import AuditConfig, GatewayConfig, ResolverConfig
from tests.processes import RedisProcess
from tests.upstream import make_upstream

# Names the tests' resolver answers; everything else fails to resolve (and the suite runs in
# a network namespace with only loopback, so a bug can never reach a real host).
STATIC_HOSTS = {
    "site.example.com": ("127.0.0.1",),
    "other.example.com": ("127.0.0.1",),
    "internal.example.com": ("10.0.0.5",),
    "metadata.example.com": ("169.254.169.254",),
    "mixed.example.com": ("127.0.0.1", "10.0.0.5"),
    "denied.example.org": ("127.0.0.1",),
    # public: only for decisions (explain); no test connects to it, and the suite's network
    # namespace has no route there
    "public.example.com": ("93.184.216.34",),
}


@pytest.fixture
async def upstream(aiohttp_server):
    return await aiohttp_server(make_upstream(), host="127.0.0.1")


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[..., str]:
    def write(text: str, name: str = "test") -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


def loopback_policy(port: int, extra: str = "") -> str:
    """A policy that admits the test upstream: `.example.com` names, loopback addresses."""
    return textwrap.dedent(
        f"""\
        name: loopback-test
        default: deny
        ports: [80, 443, {port}]
        domains:
          allow: [".example.com"]
          deny: [{{host: "blocked.example.com", message: "this site is closed to agents"}}]
        networks:
          allow: ["127.0.0.0/8"]
        timeouts: {{connect: 2, read: 1, total: 2.5}}
        limits: {{max_response_bytes: 5000000, default_max_chars: 20000, max_chars: 50000}}
        """
    ) + textwrap.dedent(extra)


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., GatewayConfig]:
    def make(policy_path: str | None, **fields: object) -> GatewayConfig:
        fields.setdefault(
            "audit", AuditConfig(path=str(tmp_path / "audit" / "gateway-{instance}.jsonl"))
        )
        fields.setdefault("resolver", ResolverConfig(hosts=STATIC_HOSTS))
        fields.setdefault("instance_id", "test-instance")
        return GatewayConfig(policy=policy_path, **fields)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def redis_server(tmp_path):
    """A private redis-server on a free loopback port, for the shared-state tests."""
    server = await RedisProcess(tmp_path).start()
    yield server
    await server.stop()
