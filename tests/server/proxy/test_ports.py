"""The listener and its connections provide every member of the interfaces requests and
tunnels talk to (mypy checks the types; this checks a member is not lost at run time), and
the tunnel provides what its connection calls."""

from __future__ import annotations

import inspect

import pytest

from gateway.server.proxy.listener import ForwardProxy, ProxyConnection
from gateway.server.proxy.ports import ClientSide, ProxyHost, TunnelRelay
from gateway.server.proxy.tunnel import Tunnel


def members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    for klass in protocol.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
        names.update(n for n, v in vars(klass).items() if inspect.isfunction(v))
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize(
    ("implementation", "protocol"),
    [(ForwardProxy, ProxyHost), (ProxyConnection, ClientSide), (Tunnel, TunnelRelay)],
    ids=["listener", "connection", "tunnel"],
)
def test_every_member_is_provided(implementation: type, protocol: type) -> None:
    source = inspect.getsource(implementation)
    missing = sorted(
        name
        for name in members(protocol)
        if not hasattr(implementation, name) and f"self.{name}" not in source
    )
    assert not missing, f"{implementation.__name__} lacks {missing}"
