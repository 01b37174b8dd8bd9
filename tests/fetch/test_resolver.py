"""The resolver's own answers: `resolver.hosts`, /etc/hosts with `system_hosts`, and
`localhost` resolved like any other name, its addresses decided by the policy."""

from __future__ import annotations

import ipaddress
import os

import pytest

from gateway.fetch import resolver as resolver_module
from gateway.fetch.resolver import (
    AddressDeniedError,
    LookupFailedError,
    PolicyResolver,
    SystemHosts,
    hosts_table,
    parse_hosts_text,
)
from gateway.policy.engine import Reason
from tests.policy.conftest import make_policy

HOSTS = """\
# a comment line
127.0.0.1   localhost  Loopback.Example.   # trailing comment
::1         localhost ip6-localhost
10.20.0.7   mirror.internal.example
127.0.0.1   localhost
not-an-ip   broken.example
fe80::1%lo  zoned.example
"""


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_hosts_file_syntax() -> None:
    table = parse_hosts_text(HOSTS)
    assert table["localhost"] == (ip("127.0.0.1"), ip("::1"))  # a repeat is kept once
    assert table["loopback.example"] == (ip("127.0.0.1"),)
    assert table["mirror.internal.example"] == (ip("10.20.0.7"),)
    assert table["zoned.example"] == (ip("fe80::1"),)
    assert "broken.example" not in table and "#" not in table


def test_the_file_is_read_again_when_it_changes(tmp_path) -> None:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.2 a.example\n")
    hosts = SystemHosts(str(path))
    assert hosts.table()["a.example"] == (ip("127.0.0.2"),)
    path.write_text("127.0.0.3 a.example b.example\n")
    os.utime(path, ns=(1, 1))  # a new modification time whatever the clock's resolution
    assert hosts.table()["b.example"] == (ip("127.0.0.3"),)
    path.unlink()
    assert hosts.table() == {}


async def test_localhost_resolves_from_the_hosts_file_and_the_policy_decides(tmp_path) -> None:
    path = tmp_path / "hosts"
    path.write_text(HOSTS)
    table = hosts_table({}, system_hosts=True, path=str(path))
    strict = PolicyResolver(make_policy(allow=["localhost"]), static_hosts=table)
    assert await strict.lookup("localhost") == [ip("127.0.0.1"), ip("::1")]
    with pytest.raises(AddressDeniedError) as info:
        await strict.resolve("localhost", 80)
    assert info.value.decision.reason is Reason.PRIVATE_ADDRESS
    allowed = PolicyResolver(
        make_policy(allow=["localhost"], net_allow=["127.0.0.0/8", "::1/128"]), static_hosts=table
    )
    answers = await allowed.resolve("localhost", 80)
    assert [a["host"] for a in answers] == ["127.0.0.1", "::1"]
    assert answers[0]["hostname"] == "localhost"


async def test_the_configuration_table_wins_over_the_hosts_file(tmp_path) -> None:
    path = tmp_path / "hosts"
    path.write_text(HOSTS)
    table = hosts_table(
        {"mirror.internal.example": ["10.9.9.9"]}, system_hosts=True, path=str(path)
    )
    resolver = PolicyResolver(make_policy(), static_hosts=table)
    assert await resolver.lookup("mirror.internal.example") == [ip("10.9.9.9")]
    assert set(table) >= {"mirror.internal.example", "localhost"} and len(table) == len(set(table))


async def test_without_system_hosts_the_failure_says_which_key_reads_the_file(
    tmp_path, monkeypatch
) -> None:
    # In the loopback namespace the system resolver answers nothing for this name.
    path = tmp_path / "hosts"
    path.write_text("127.0.0.9 only-in-hosts.test\n")
    monkeypatch.setattr(resolver_module, "SYSTEM_HOSTS_PATH", str(path))
    resolver = PolicyResolver(make_policy(), static_hosts=hosts_table({}, system_hosts=False))
    with pytest.raises(LookupFailedError) as info:
        await resolver.lookup("only-in-hosts.test")
    assert "resolver.system_hosts: true" in str(info.value)
    with pytest.raises(LookupFailedError) as other:
        await resolver.lookup("elsewhere.test")
    assert "system_hosts" not in str(other.value)
