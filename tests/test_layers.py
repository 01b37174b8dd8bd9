"""Dependencies point one way (docs/design.md), and every outbound socket is dialled in
fetch/dial.py; read with ast, so no import runs.

policy, yamlstrict, extract and provenance are pure (no asyncio, no aiohttp); nothing imports server or
cli; fetch never imports search, tools, server or runtime; tools never import server; review
(the audit page's reading) imports neither aiohttp nor jinja2.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"

# layer -> modules it must never import
FORBIDDEN = {
    "policy": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "gateway.audit"),
    # Strict YAML: the plumbing policies and the configuration both read with; knows neither.
    "yamlstrict": ("asyncio", "aiohttp", "gateway.policy", "gateway.config", "gateway.configload", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "gateway.audit"),
    "extract": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "trafilatura"),
    "provenance": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "audit": ("aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "fetch": ("gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "search": ("gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "tools": ("gateway.server", "gateway.cli", "gateway.runtime"),
    # The review page's reading: files only, no network, no web framework.
    "review": ("asyncio", "aiohttp", "jinja2", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


CASES = [(layer, path) for layer in FORBIDDEN for path in sorted((PACKAGE / layer).rglob("*.py"))]


@pytest.mark.parametrize(("layer", "path"), CASES, ids=[f"{layer}/{p.relative_to(PACKAGE / layer)}" for layer, p in CASES])
def test_layer_imports_point_one_way(layer: str, path: Path) -> None:
    bad = sorted(
        name
        for name in imports_of(path)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[layer])
    )
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_nothing_imports_server_or_cli_except_adapters() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).parts
        if relative[0] in ("server", "cli") or relative[-1] == "__main__.py":
            continue
        bad = [n for n in imports_of(path) if n.startswith(("gateway.server", "gateway.cli"))]
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


# One choke point at the socket (gateway/fetch/dial.py): calls that open an outbound
# connection, and the clients that would open one behind our back. Where each is allowed, and
# on what condition (a keyword the call must carry).
DIAL_CALLS = {
    "create_connection",
    "open_connection",
    "sock_connect",
    "start_connection",
    "create_datagram_endpoint",
    "create_unix_connection",
    "open_unix_connection",
    "connect_accepted_socket",
    "TCPConnector",
    "ClientSession",
    "socket",
    "fromfd",
}
DIAL_EXEMPT = {
    # the choke point itself
    ("fetch/dial.py", "TCPConnector"): None,
    ("fetch/dial.py", "socket"): None,
    ("fetch/dial.py", "sock_connect"): None,
    ("fetch/dial.py", "create_connection"): "sock",  # over the socket it just checked
    # the Fetcher's session, over the connector that fetch/dial.py builds
    ("fetch/client.py", "ClientSession"): "connector",
    # wraps an accepted client socket's descriptor for splice(2); dials nothing
    ("server/proxy_splice.py", "socket"): "fileno",
}
# Outbound clients no module may use (the Redis client of state.redis is the operator's own
# and lives in gateway/state; the system resolver's queries go through getaddrinfo).
DIAL_MODULES = ("http.client", "urllib.request", "urllib3", "requests", "httpx", "socket.create_connection")


def dial_calls(path: Path) -> list[tuple[str, int, set[str]]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in DIAL_CALLS:
            found.append((name, node.lineno, {k.arg for k in node.keywords if k.arg}))
    return found


def test_every_outbound_connection_is_dialled_through_fetch_dial() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE))
        for name, line, keywords in dial_calls(path):
            key = (relative, name)
            if key in DIAL_EXEMPT and (DIAL_EXEMPT[key] is None or DIAL_EXEMPT[key] in keywords):
                continue
            bad.append(f"{relative}:{line}: {name}(...)")
        for module in imports_of(path):
            if any(module == m or module.startswith(m + ".") for m in DIAL_MODULES):
                bad.append(f"{relative}: imports {module}")
            if module.split(".")[0] == "redis" and not relative.startswith("state/"):
                bad.append(f"{relative}: imports {module} (Redis belongs to gateway/state)")
    assert not bad, "connections opened outside gateway/fetch/dial.py:\n" + "\n".join(bad)


def test_the_dial_check_sees_a_connection_opened_elsewhere(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio, aiohttp\n"
        "async def f(loop):\n"
        "    await loop.create_connection(lambda: None, '10.0.0.1', 80)\n"
        "    await asyncio.open_connection('10.0.0.1', 80)\n"
        "    aiohttp.ClientSession()\n"
    )
    assert sorted(name for name, _, _ in dial_calls(sample)) == ["ClientSession", "create_connection", "open_connection"]
