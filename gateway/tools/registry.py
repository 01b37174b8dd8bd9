"""The tool registry: one entry per agent tool, shared by the HTTP API, MCP and OpenAPI.

An entry names the tool, its request schema (tools/schema.py), a description written for
models, the call, and how its result reads as text for a model (MCP). Adding a tool means
adding an entry here; the adapters list and call whatever is registered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from gateway.audit.log import AuditLog
from gateway.audit.redaction import redact_text
from gateway.errors import AuditWriteError, GatewayError, InternalError, InvalidRequestError
from gateway.policy.model import Policy
from gateway.tools.context import CallContext
from gateway.tools.records import refusal_record, tool_record

ToolCall = Callable[[CallContext, Mapping[str, Any]], Awaitable[dict[str, Any]]]
TextRender = Callable[[Mapping[str, Any]], str]

log = logging.getLogger("gateway.tools")

# A tool made of others is enabled by their settings, and a refusal names the first of them
# that is off (policy.engine.decide_tool's `needs`): Research searches, then fetches.
TOOL_NEEDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"Research": ("WebSearch", "WebFetch")}
)


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
    """With an audit log, every registered call is `audited`: a refusal its tool raised
    without a record (a schema error, an unknown `id:` or provider) gets one."""

    def __init__(self, audit: AuditLog | None = None) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._by_path: dict[str, ToolSpec] = {}
        self._audit = audit

    def add(self, spec: ToolSpec) -> None:
        if self._audit is not None:
            spec = replace(spec, call=audited(spec.name, spec.call, self._audit))
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

    def record_refusal(
        self,
        name: str,
        ctx: CallContext,
        error: GatewayError,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the record of a call to tool `name` refused before the tool ran (over the
        client's limits, a body too large or not a JSON object, draining), naming the `url`
        or `query` of `args` when known; raises AuditWriteError when it cannot be written."""
        if self._audit is not None:
            self._audit.append(_unrecorded(name, ctx, error, args or {}))


# Long enough to tell calls apart; the audit log redacts credentials in URLs itself.
_RECORDED_TEXT_CHARS = 2000


def audited(action: str, call: ToolCall, audit: AuditLog) -> ToolCall:
    """`call`, plus a record, written before the error leaves, for any refusal or failure
    the tool raised without recording it; if that write fails the caller gets
    AuditWriteError instead (fail closed: no call goes unrecorded). Any other exception is
    a bug: logged with its traceback, recorded and raised as InternalError, so the agent
    gets the API's error shape and the call is still on record. Cancellation is not
    an exception here (the drain records cut-off calls). A log that cannot be written
    (`AuditLog.preflight`) refuses the call before it starts."""

    async def run(ctx: CallContext, args: Mapping[str, Any]) -> dict[str, Any]:
        # A log that cannot take the call's record refuses it before anything leaves.
        audit.preflight()
        try:
            return await call(ctx, args)
        except GatewayError as error:
            if not error.recorded and not isinstance(error, AuditWriteError):
                audit.append(_unrecorded(action, ctx, error, args))
            raise
        except Exception as exc:
            log.exception("%s call failed", action, extra={"request_id": ctx.request_id})
            # The agent sees no detail of the bug; the log line above has it.
            internal = InternalError("internal error; see the gateway's log")
            audit.append(_unrecorded(action, ctx, internal, args))
            raise internal from exc

    return run


def _unrecorded(
    action: str, ctx: CallContext, error: GatewayError, args: Mapping[str, Any]
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    url, query = args.get("url"), args.get("query")
    if isinstance(url, str):
        fields["url"] = {"original": url[:_RECORDED_TEXT_CHARS]}
    if isinstance(query, str):
        fields["search"] = {"query": redact_text(query[:_RECORDED_TEXT_CHARS]), "results": 0}
    if isinstance(error, InvalidRequestError):
        return refusal_record(action, ctx, error, **fields)
    return tool_record(action, ctx, decision=None, error=error, **fields)
