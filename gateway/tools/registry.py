"""The tool registry: one entry per agent tool, shared by the HTTP API, MCP and OpenAPI.

An entry names the tool, its request schema (tools/schema.py), a description written for
models, the call, and how its result reads as text for a model (MCP). Adding a tool means
adding an entry here; the adapters list and call whatever is registered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.policy.model import Policy
from gateway.tools.context import CallContext

ToolCall = Callable[[CallContext, Mapping[str, Any]], Awaitable[dict[str, Any]]]
TextRender = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str  # "WebFetch", "WebSearch", "XSearch", "Research"
    path: str  # the HTTP API path, e.g. "/v1/fetch"
    description: str  # for models: what it does, when to use it, how to read the result
    input_schema: dict[str, Any]
    call: ToolCall
    render_text: TextRender

    def enabled_for(self, policy: Policy) -> bool:
        return policy.tool(self.name).enabled


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._by_path: dict[str, ToolSpec] = {}

    def add(self, spec: ToolSpec) -> None:
        self._tools[spec.name] = spec
        self._by_path[spec.path] = spec

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def at_path(self, path: str) -> ToolSpec | None:
        """The tool whose HTTP API path is `path` (a lookup every API request makes)."""
        return self._by_path.get(path)

    def all(self) -> list[ToolSpec]:
        return list(self._tools.values())

    def enabled_for(self, policy: Policy) -> list[ToolSpec]:
        return [spec for spec in self._tools.values() if spec.enabled_for(policy)]
