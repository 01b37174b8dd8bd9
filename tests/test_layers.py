"""Dependencies point one way (docs/design.md), and every outbound socket is dialled in
fetch/dial.py; read with ast, so no import runs.

policy, yamlstrict, wire, extract and provenance are pure (no asyncio, no aiohttp); wire (the
HTTP/1 wire format both fetch and the proxy adapter read with) knows only gateway.errors;
nothing imports server or cli; fetch never imports search, tools, server or runtime; tools
never import server or the configuration; review (the audit page's reading) imports neither aiohttp nor jinja2;
the adapters (server, cli) reach policy and fetch only through tools and runtime; and no
module of gateway/ imports itself back through others (no cycle, whether the import is at
the top, inside a function or only for type checking).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"

# layer -> modules it must never import
FORBIDDEN = {
    "policy": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "gateway.audit"),
    # HTTP/1's wire format (limits, the strict response reader): what fetch's readers and the
    # proxy's request reader share. Pure; of the gateway it may import only WIRE_MAY_IMPORT.
    "wire": ("asyncio", "aiohttp", "socket"),
    # Strict YAML: the plumbing policies and the configuration both read with; knows neither.
    "yamlstrict": ("asyncio", "aiohttp", "gateway.policy", "gateway.config", "gateway.configload", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "gateway.audit"),
    "extract": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime", "trafilatura"),
    "provenance": ("asyncio", "aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "audit": ("aiohttp", "gateway.fetch", "gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "fetch": ("gateway.search", "gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    "search": ("gateway.tools", "gateway.server", "gateway.cli", "gateway.runtime"),
    # Tools get what they need from the composition root (runtime), never the configuration.
    "tools": ("gateway.server", "gateway.cli", "gateway.runtime", "gateway.config", "gateway.configload"),
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
            # `from gateway import policy` imports gateway.policy: the names count too.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
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


# What of the gateway `wire` may import: stated, so the neutral package stays neutral.
WIRE_MAY_IMPORT = ("gateway.errors",)


@pytest.mark.parametrize("path", sorted((PACKAGE / "wire").rglob("*.py")), ids=lambda p: p.name)
def test_wire_imports_nothing_of_the_gateway_but_errors(path: Path) -> None:
    bad = sorted(
        name
        for name in imports_of(path)
        if name.startswith("gateway.") and not name.startswith(("gateway.wire", *WIRE_MAY_IMPORT))
    )
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_nothing_imports_server_or_cli_except_adapters() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).parts
        if relative[0] in ("server", "cli") or relative[-1] == "__main__.py":
            continue
        bad = [n for n in imports_of(path) if n.startswith(("gateway.server", "gateway.cli"))]
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


# The adapters translate: they call tools and runtime, never policy or fetch themselves.
ADAPTERS = ("server", "cli")
ADAPTER_FORBIDDEN = ("gateway.policy", "gateway.fetch")
ADAPTER_CASES = sorted(
    str(path.relative_to(PACKAGE)) for layer in ADAPTERS for path in (PACKAGE / layer).rglob("*.py")
)


@pytest.mark.parametrize("module", ADAPTER_CASES)
def test_adapters_reach_policy_and_fetch_only_through_tools(module: str) -> None:
    bad = sorted(
        name
        for name in imports_of(PACKAGE / module)
        if any(name == banned or name.startswith(banned + ".") for banned in ADAPTER_FORBIDDEN)
    )
    assert not bad, f"{module} imports {bad}; call a tool (gateway/tools) or runtime instead"


# The proxy adapter feeds the forward-traffic machine and carries out its commands: of the
# tools it knows only the machine and the use case that runs its I/O, never the decisions
# (tools.forward) behind them.
PROXY_ADAPTER_TOOLS = ("gateway.tools.forward_flow", "gateway.tools.forward_traffic")


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "server" / "proxy").rglob("*.py")), ids=lambda p: p.name
)
def test_the_proxy_adapter_reaches_only_the_forward_traffic_machine(path: Path) -> None:
    bad = sorted(
        name
        for name in imports_of(path)
        if name.startswith("gateway.tools")
        and not any(name == allowed or name.startswith(allowed + ".") for allowed in PROXY_ADAPTER_TOOLS)
    )
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}; feed tools.forward_flow instead"


# --- no import cycles ----------------------------------------------------------------------

# Cycles known and being removed. Each entry is one strongly connected set of modules; the
# test fails when it changes (grows, shrinks or goes), so it can only be taken out.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the package it imports anywhere in its text: at the top, in a
    function, under `if TYPE_CHECKING:` (ast.walk sees them all). `from a import b` counts
    as importing the module a.b when there is one, else a."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` steps up
                    up = package[: len(package) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in modules else base)
        graph[name] = {target for target in found if target in modules and target != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.add(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        cycles.append(frozenset(members))
    return cycles


def test_no_import_cycles_inside_the_package() -> None:
    cycles = set(import_cycles(import_graph(PACKAGE)))
    new = [sorted(cycle) for cycle in cycles - KNOWN_CYCLES]
    assert not new, f"import cycles: {new}; move what both sides need into a module of its own"
    gone = [sorted(cycle) for cycle in KNOWN_CYCLES - cycles]
    assert not gone, f"no longer cycles: {gone}; drop them from KNOWN_CYCLES"


def test_the_cycle_check_sees_a_hidden_cycle(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg.sub import b\n")
    (root / "sub" / "b.py").write_text("def f():\n    from pkg import c\n")
    (root / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
    )
    (root / "d.py").write_text("import pkg.a\n")  # imports into the cycle, is not in it
    assert import_cycles(import_graph(root)) == [frozenset({"pkg.a", "pkg.sub.b", "pkg.c"})]


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
    ("server/proxy/splice.py", "socket"): "fileno",
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
