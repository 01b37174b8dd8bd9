"""The explain use case: steps 1-3 for the URL, step 4 for literals, given or resolved
addresses; a denied name never looked up, a failed lookup a fail-closed deny. Then both of its
adapters (`POST /v1/policy/explain`, `gateway policy explain --json`) asked the same URLs give
the same verdict, because both call it. Lookups are answered from a static table or a fake
system resolver, never real DNS."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.policy.load import load_policy_bytes
from gateway.policy.model import Policy
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.tools.explain import explain, judge

POLICY = """\
version: 1
name: explained
domains:
  allow: [docs.example.com, mixed.example.com, gone.example.com]
  deny: [{host: blocked.example.com, message: closed to agents}]
networks:
  allow: [10.20.0.0/16, 169.254.0.0/16]  # the second: the metadata address still refused
"""
REPORT = "mode: report\ndomains: {allow: [docs.example.com, gone.example.com]}\n"
STATIC = {
    "docs.example.com": (ipaddress.ip_address("93.184.216.34"),),
    "mixed.example.com": (ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.5")),
}


def policy_of(text: str) -> Policy:
    policy, _ = load_policy_bytes(text.encode(), source="p.yaml", default_name="p")
    return policy


def facts(verdict: Any) -> tuple[str, str | None, str]:
    return verdict.verdict, verdict.reason, verdict.rule


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stands in for the system resolver: every name fails, and is noted."""
    names: list[str] = []

    def fail(host: str, *args: Any, **kwargs: Any) -> Any:
        names.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    return names


def test_an_ip_literal_is_checked_at_step_4_without_resolving() -> None:
    policy = policy_of(POLICY)
    literal = judge(policy, "http://10.20.0.7/")
    assert facts(literal) == ("allow", None, "networks.allow[0]")
    assert literal.addresses == (ipaddress.ip_address("10.20.0.7"),)
    own = [(ipaddress.ip_network("10.20.0.7/32"), 80)]
    assert judge(policy, "http://10.20.0.7/", own_addresses=own).reason == "own_address"


def test_given_addresses_decide_and_an_exemption_names_its_rule() -> None:
    policy = policy_of(POLICY)
    inside = judge(
        policy, "https://docs.example.com/", addresses=[ipaddress.ip_address("10.20.0.7")]
    )
    assert facts(inside) == ("allow", None, "networks.allow[0]")
    private = judge(
        policy, "https://docs.example.com/", addresses=[ipaddress.ip_address("10.0.0.5")]
    )
    assert facts(private) == ("deny", "private_address", "networks.block_private")


async def test_without_resolve_nothing_is_looked_up(asked: list[str]) -> None:
    verdict = await explain(policy_of(POLICY), "https://gone.example.com/")
    assert facts(verdict) == ("allow", None, "domains.allow[2]")
    assert asked == [] and not verdict.checked_addresses


async def test_resolve_checks_every_address_of_the_static_table(asked: list[str]) -> None:
    verdict = await explain(
        policy_of(POLICY), "https://mixed.example.com/", resolve=True, static_hosts=STATIC
    )
    assert facts(verdict) == ("deny", "private_address", "networks.block_private")
    assert verdict.addresses == STATIC["mixed.example.com"]
    assert asked == []


async def test_a_denied_name_never_reaches_the_resolver(asked: list[str]) -> None:
    verdict = await explain(policy_of(POLICY), "https://blocked.example.com/", resolve=True)
    assert facts(verdict) == ("deny", "domain_denied", "domains.deny[0]")
    assert asked == [] and not verdict.checked_addresses


async def test_a_failed_lookup_is_a_deny_even_in_report_mode(asked: list[str]) -> None:
    verdict = await explain(policy_of(REPORT), "https://gone.example.com/", resolve=True)
    assert facts(verdict) == ("deny", "upstream_unreachable", "resolve")
    assert verdict.enforced and verdict.lookup_error and "gone.example.com" in verdict.lookup_error
    assert asked == ["gone.example.com."]  # the absolute name: no search list applies


async def test_a_method_is_checked_only_for_plain_http() -> None:
    policy = policy_of(POLICY.replace("networks:", "methods: [GET]\nnetworks:"))
    plain = await explain(policy, "http://docs.example.com/", method="POST")
    assert facts(plain)[:2] == ("deny", "method_not_allowed")
    tunnelled = await explain(policy, "https://docs.example.com/", method="POST")
    assert tunnelled.verdict == "allow" and tunnelled.note and "CONNECT" in tunnelled.note


PARITY = [
    "https://docs.example.com/",
    "https://blocked.example.com/x",
    "https://unlisted.example.net/",
    "http://10.0.0.9/",
    "http://10.20.0.7/",
    "http://169.254.169.254/latest",
    "ftp://docs.example.com/",
]


async def test_the_api_and_the_cli_give_the_same_verdict(
    tmp_path: Path, make_config: Any, aiohttp_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "explained.yaml"
    path.write_text(POLICY)
    services = Services(make_config(str(path)))
    services.open()
    try:
        client = await aiohttp_client(make_app(services))
        for url in PARITY:
            response = await client.post("/v1/policy/explain", json={"url": url})
            api = await response.json()
            argv = ["policy", "explain", "--json", str(path), url]
            assert await asyncio.to_thread(main, argv) == 0  # the CLI runs its own loop
            cli = json.loads(capsys.readouterr().out)
            fields = ("decision", "reason", "rule", "enforced", "message")
            assert {k: api[k] for k in fields} == {k: cli[k] for k in fields}, url
    finally:
        await services.close()


def test_judging_without_resolving_never_loads_aiohttp(tmp_path: Path) -> None:
    """`gateway policy check|test|explain` stay light: the resolver's module (and aiohttp
    with it) loads only when a name is resolved."""
    path = tmp_path / "explained.yaml"
    path.write_text(POLICY)
    script = (
        "import sys\n"
        "from gateway.cli import main\n"
        f"main(['policy', 'explain', {str(path)!r}, 'http://10.20.0.7/'])\n"
        "assert 'aiohttp' not in sys.modules, 'aiohttp loaded'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "allow" in done.stdout


CONFIGURED = [
    "https://mirror.internal.example/simple/",  # resolver.hosts: an exempted internal answer
    "https://mixed.example.com/",  # resolver.hosts: one private address in the answer
    "https://docs.example.com/",  # resolver.hosts: public
    "https://gone.example.com/",  # no answer anywhere: fail closed
    "https://blocked.example.com/x",  # denied before any lookup
    "http://169.254.169.254/latest",  # never allowed, whatever the policy
]


async def test_cli_with_config_answers_what_the_api_answers_when_resolving(
    tmp_path: Path,
    aiohttp_client: Any,
    capsys: pytest.CaptureFixture[str],
    asked: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`gateway policy explain --resolve --config CFG --client ID` and `POST
    /v1/policy/explain` with `resolve: true` under that client's token: the same resolver
    table (resolver.hosts), the same client policy, the same verdict, message and hint."""
    import hashlib

    from gateway.configload import load_config_file

    (tmp_path / "client.yaml").write_text(
        POLICY.replace("gone.example.com]", "gone.example.com, mirror.internal.example]")
    )
    (tmp_path / "other.yaml").write_text("name: other\n")  # the config's own: not the client's
    token = "gwt_explain-parity"
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(
        "policy: other.yaml\n"
        f"audit: {{path: {tmp_path / 'audit' / 'g.jsonl'}}}\n"
        "clients:\n"
        f"  - {{id: research, token_sha256: {hashlib.sha256(token.encode()).hexdigest()},"
        " policy: client.yaml}\n"
        "resolver:\n"
        "  hosts:\n"
        "    mirror.internal.example: [10.20.0.7]\n"
        "    mixed.example.com: [93.184.216.34, 10.0.0.5]\n"
        "    docs.example.com: [93.184.216.34]\n"
    )
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    services = Services(load_config_file(config_path))
    services.open()
    fields = ("decision", "reason", "rule", "enforced", "message", "hint", "addresses")
    said: dict[str, Any] = {}
    try:
        client = await aiohttp_client(make_app(services))
        headers = {"Authorization": f"Bearer {token}"}
        for url in CONFIGURED:
            response = await client.post(
                "/v1/policy/explain", json={"url": url, "resolve": True}, headers=headers
            )
            api = await response.json()
            argv = ["policy", "explain", "--json", "--resolve", "--config", str(config_path)]
            assert await asyncio.to_thread(main, [*argv, "--client", "research", url]) == 0
            cli = json.loads(capsys.readouterr().out)
            said[url] = cli
            assert {k: api.get(k) or None for k in fields} == {
                k: cli.get(k) or None for k in fields
            }, url
    finally:
        await services.close()
    mirror = said[CONFIGURED[0]]
    assert (mirror["decision"], mirror["rule"], mirror["addresses"]) == (
        "allow",
        "networks.allow[0]",
        ["10.20.0.7"],
    )
    assert said[CONFIGURED[1]]["reason"] == "private_address"
    assert said[CONFIGURED[3]]["reason"] == "upstream_unreachable"
    assert "closed to agents" in said[CONFIGURED[4]]["message"]
    assert said[CONFIGURED[5]]["hint"].startswith("never allowed: cloud metadata")
    assert asked == ["gone.example.com."] * 2  # only the name no table answers reached DNS
    # Without the configuration the CLI cannot know the gateway's answer: it says so by failing
    # closed, never by allowing.
    argv = ["policy", "explain", "--json", "--resolve", str(tmp_path / "client.yaml")]
    assert await asyncio.to_thread(main, [*argv, CONFIGURED[0]]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "upstream_unreachable"
