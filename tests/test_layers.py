"""Dependencies point one way (docs/design.md), and every outbound socket is dialled in
fetch/dial.py; read with ast, so no import runs.

policy, yamlstrict, wire, extract and provenance are pure (no asyncio, no aiohttp); wire (the
HTTP/1 wire format both fetch and the proxy adapter read with) knows only gateway.errors;
nothing imports server or cli; fetch never imports search, tools, server or runtime; tools
never import server or the configuration; review (the audit page's reading) imports neither aiohttp nor jinja2;
the adapters (server, cli) reach policy and fetch only through tools and runtime; and no
module of gateway/ imports itself back through others (no cycle, whether the import is at
the top, inside a function or only for type checking).

What a module *loads* is checked too, in a fresh interpreter (an import inside an imported
module counts): wire loads the standard library and gateway.errors alone. No module uses a
private module or a `_name` of another project, and no task is started and dropped.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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
    ("fetch/dial.py", "socket"): None,
    ("fetch/dial.py", "sock_connect"): None,
    ("fetch/dial.py", "create_connection"): "sock",  # over the socket it just checked
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


# --- what a module loads, not only what it names ---------------------------------------------

# Run in a fresh interpreter: import each module of a layer in turn and say which modules
# each import added to sys.modules (whatever loaded them: an import in an imported module, a
# package's __init__, a function run at import time).
LOADS_SCRIPT = """
import importlib, json, pkgutil, sys
layer = sys.argv[1]
package = importlib.import_module(layer)
added = {}
names = [layer] + sorted(m.name for m in pkgutil.walk_packages(package.__path__, layer + "."))
for name in names:
    before = set(sys.modules)
    importlib.import_module(name)
    added[name] = sorted(set(sys.modules) - before)
print(json.dumps(added))
"""


def loaded_by(layer: str) -> dict[str, list[str]]:
    """module of `layer` -> the modules importing it first loaded."""
    done = subprocess.run(
        [sys.executable, "-c", LOADS_SCRIPT, layer],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=PACKAGE.parent,
    )
    return json.loads(done.stdout)


# What a layer must never load (itself or through anything it imports), beyond FORBIDDEN's
# direct imports: the same names, since a ban that an indirect import can dodge is no ban.
LOAD_CASES = sorted(FORBIDDEN)


@pytest.mark.parametrize("layer", LOAD_CASES)
def test_what_a_layer_loads_points_one_way(layer: str) -> None:
    bad = sorted(
        f"{module} loads {name}"
        for module, names in loaded_by(f"gateway.{layer}").items()
        for name in names
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[layer])
    )
    assert not bad, f"gateway.{layer}: " + "; ".join(bad)


def test_wire_loads_only_the_standard_library_and_errors() -> None:
    allowed = ("gateway", "gateway.errors", "gateway.wire")
    bad = sorted(
        f"{module} loads {name}"
        for module, names in loaded_by("gateway.wire").items()
        for name in names
        if name.split(".")[0] not in sys.stdlib_module_names
        and not (name in allowed or name.startswith("gateway.wire."))
    )
    assert not bad, "; ".join(bad)


def test_the_load_check_sees_an_indirect_import(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg import b\n")
    (root / "b.py").write_text("import colorsys\n")  # a.py names neither colorsys nor b's
    done = subprocess.run(
        [sys.executable, "-c", LOADS_SCRIPT, "pkg"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    added = json.loads(done.stdout)
    assert "pkg.b" in added["pkg.a"] and "colorsys" in added["pkg.a"]


# --- dependencies through their public API only --------------------------------------------


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# Projects whose internal modules carry no underscore: only these of their submodules are
# documented API (aiohttp's reference: client and server at the top and in `web`, `abc`,
# the test helpers); `aiohttp.client_proto` and the like are its internals.
PUBLIC_SUBMODULES = {"aiohttp": ("web", "abc", "test_utils", "pytest_plugin")}


def private_module(module: str) -> bool:
    parts = module.split(".")
    public = PUBLIC_SUBMODULES.get(parts[0])
    return any(map(is_private, parts)) or (public is not None and len(parts) > 1 and parts[1] not in public)


def foreign_roots(tree: ast.Module) -> set[str]:
    """Names in a module bound to another project's modules or objects: what its imports
    from third-party packages bind, and names assigned from an expression rooted in one
    (`site = web.TCPSite(...)`, `with aiohttp.ClientSession() as session`)."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if third_party(alias.name):
                    roots.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and third_party(node.module):
            roots.update(alias.asname or alias.name for alias in node.names)
    for _ in range(3):  # assignments of assignments, a few steps deep
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
                targets, value = [node.target], node.value
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                targets, value = [node.optional_vars], node.context_expr
            if value is not None and root_name(value) in roots:
                roots.update(t.id for t in targets if isinstance(t, ast.Name))
    return roots


def third_party(module: str | None) -> bool:
    top = (module or "").split(".")[0]
    return bool(top) and top != "gateway" and top != "__future__" and top not in sys.stdlib_module_names


def root_name(node: ast.expr) -> str | None:
    """The name an expression such as `a.b(c).d[0]` or `await a.b()` starts from."""
    while True:
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Await):
            node = node.value
        else:
            return node.id if isinstance(node, ast.Name) else None


def private_uses(path: Path) -> list[str]:
    """`module:line: what` for each import of a private module of another project (`from
    aiohttp.client_proto import …`, `import yaml._yaml`, `from aiohttp import _helpers`) and
    each `_name` read from a name bound to another project's module or object."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if third_party(alias.name) and private_module(alias.name):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and third_party(node.module):
            assert node.module is not None
            if private_module(node.module):
                found.append(f"{node.lineno}: from {node.module} import …")
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    roots = foreign_roots(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and root_name(node.value) in roots:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


# Uses known and being removed (each one to replace with the public API, or with a piece of
# our own in the module that owns the hazard). The test fails when this set changes in
# either direction, so an entry can only be taken out.
KNOWN_PRIVATE_USES: set[tuple[str, str]] = {
    # yarl's URL parser internals, a fast path with a fallback (policy/urls.py)
    ("policy/urls.py", "from yarl._parse import …"),
    ("policy/urls.py", "from yarl._path import …"),
    ("policy/urls.py", "from yarl._quoters import …"),
    ("policy/urls.py", "from yarl._url import …"),
    ("policy/urls.py", "from yarl._url import _encode_host"),
    # PyYAML's libyaml parser class, for the strict composer (yamlstrict/source.py)
    ("yamlstrict/source.py", "from yaml._yaml import …"),
    # re2's compiled-pattern type, in an annotation (provenance/markers.py)
    ("provenance/markers.py", "re2._Regexp"),
    # lxml's element class, in annotations (extract/)
    ("extract/byline.py", "etree._Element"),
    ("extract/content.py", "etree._Element"),
    ("extract/document.py", "etree._Element"),
    ("extract/markdown.py", "etree._Element"),
    ("extract/tree.py", "etree._Element"),
}


def test_dependencies_are_used_through_their_public_api_only() -> None:
    seen: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE))
        for use in private_uses(path):
            seen.add((relative, use.split(": ", 1)[1]))
    new = sorted(seen - KNOWN_PRIVATE_USES)
    assert not new, f"private modules or names of other projects: {new}"
    gone = sorted(KNOWN_PRIVATE_USES - seen)
    assert not gone, f"no longer used: {gone}; drop them from KNOWN_PRIVATE_USES"


def test_the_private_api_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import aiohttp\n"
        "import yaml._yaml, aiohttp.web\n"
        "from aiohttp.client_proto import ResponseHandler\n"
        "from aiohttp import _helpers, web\n"
        "from gateway.errors import GatewayError\n"
        "async def f(connector, own):\n"
        "    connector._factory = None\n"  # not known to be aiohttp's: out of an ast's reach
        "    own._cache = 1\n"
        "    site = web.TCPSite(None)\n"
        "    site._server.close()\n"
        "    async with aiohttp.ClientSession() as session:\n"
        "        session._connector\n"
        "    aiohttp._private\n"
        "    GatewayError._x\n"
    )
    assert sorted(private_uses(sample)) == [
        "10: site._server",
        "12: session._connector",
        "13: aiohttp._private",
        "2: import yaml._yaml",
        "3: from aiohttp.client_proto import …",
        "4: from aiohttp import _helpers",
    ]


# --- every task is kept ---------------------------------------------------------------------

TASK_STARTS = {"create_task", "ensure_future", "run_coroutine_threadsafe"}


def dropped_tasks(path: Path) -> list[int]:
    """Lines that start a task and keep no reference to it (the event loop holds tasks
    weakly: one nobody holds can be collected mid-run, and nobody awaits or cancels it)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in TASK_STARTS:
                lines.append(node.lineno)
    return lines


def test_every_task_the_gateway_starts_is_kept() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in dropped_tasks(path)
    ]
    assert not bad, f"tasks started and dropped (keep them; await or cancel them on close): {bad}"


def test_the_task_check_sees_a_dropped_task(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio\n"
        "def f(loop, coro, tasks):\n"
        "    asyncio.get_running_loop().create_task(coro)\n"
        "    loop.create_task(coro)\n"
        "    tasks.add(loop.create_task(coro))\n"
        "    kept = asyncio.ensure_future(coro)\n"
    )
    assert dropped_tasks(sample) == [3, 4]
