"""Dependencies point one way (docs/design.md); read with ast, so no import runs.

policy, extract and provenance are pure (no asyncio, no aiohttp); nothing imports server or
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
