"""Audit records of tool calls and of forward-proxy traffic, in ECS field names, and of failed
authentication. Built here, every one around the same event/client/policy/trace core; written
by audit (which adds time, observer and chain, and redacts URLs). Nothing here copies headers
or bodies; a tunnel's bytes are only counted.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from gateway.errors import GatewayError, PolicyDeniedError, ToolDisabledError
from gateway.policy.dlprecords import mark_record
from gateway.policy.engine import Decision
from gateway.policy.model import Policy
from gateway.tools.context import CallContext

# Event ids come from the system's random source 4 KiB at a time (one getrandom(2) per 256
# ids rather than per id); a forked child starts with an empty buffer, so no two processes
# hand out the same bytes.
_RANDOM_BYTES = 4096
_random = bytearray()
_random_lock = threading.Lock()


def _forget_random() -> None:
    global _random_lock
    _random.clear()
    _random_lock = threading.Lock()  # a lock held by another thread at fork stays held


os.register_at_fork(after_in_child=_forget_random)


def new_event_id() -> str:
    """128 random bits in hex, as a uuid4's hex but without building a UUID (4x cheaper)."""
    with _random_lock:
        if not _random:
            _random.extend(os.urandom(_RANDOM_BYTES))
        chunk = _random[-16:]
        del _random[-16:]
    return chunk.hex()


def policy_block(policy: Policy, decision: Decision | None) -> dict[str, Any]:
    """The record's `policy`: which policy, and what it decided; a record of a request that
    ended before any rule decided (a bad request, a rate limit) has `decision: null`."""
    block: dict[str, Any] = {"name": policy.name, "sha256": policy.sha256}
    if decision is None:
        block.update({"decision": None, "enforced": True, "rule": None, "reason": None})
    else:
        block.update(decision.to_dict())
        block.pop("message", None)
    return block


def _core(
    action: str,
    *,
    event_id: str,
    outcome: str,
    kind: list[str],
    duration_ms: int,
    client_id: str | None,
    policy: dict[str, Any] | None,
    trace_id: str | None,
) -> dict[str, Any]:
    """What every decision record starts with."""
    return {
        "event": {
            "id": event_id,
            "action": action,
            "outcome": outcome,
            "type": kind,
            "duration_ms": duration_ms,
        },
        "client": {"id": client_id},
        "policy": policy,
        "trace": {"id": trace_id},
    }


def tool_record(
    action: str,
    ctx: CallContext,
    *,
    decision: Decision | None,
    error: GatewayError | None = None,
    event_id: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One record for one call; a denial is outcome failure / type denied. `event_id` is the
    id of the envelope the call answers with, so a signed response leads to its record."""
    denied = isinstance(error, PolicyDeniedError | ToolDisabledError) or (
        error is not None and error.reason == "invalid_url"
    )
    if error is None:
        outcome, kind = "success", ["allowed"]
    elif denied:
        outcome, kind = "failure", ["denied"]
    else:
        outcome, kind = "failure", ["error"]
    record = _core(
        action,
        # A call without an envelope still gets an id of the same form (32 hex digits).
        event_id=event_id or new_event_id(),
        outcome=outcome,
        kind=kind,
        duration_ms=ctx.elapsed_ms,
        client_id=ctx.client_label,
        policy=policy_block(ctx.policy, decision),
        trace_id=ctx.request_id,
    )
    if error is not None:
        record["error"] = {"code": error.code, "message": error.message[:500]}
        # Every caller appends what it builds (and an append that fails raises
        # AuditWriteError in place of this error), so the error is on record from here.
        error.recorded = True
    record.update({k: v for k, v in fields.items() if v is not None})
    mark_record(record, ctx.policy.dlp, decision.dlp if decision is not None else None)
    return record


def refusal_record(
    action: str, ctx: CallContext, error: GatewayError, **fields: Any
) -> dict[str, Any]:
    """The record of a call refused before its tool decided anything (a bad argument, an
    unknown result id or provider): decision deny, the error's reason (else its code)."""
    record = tool_record(action, ctx, decision=None, error=error, **fields)
    record["event"].update(outcome="failure", type=["denied"])
    record["policy"].update(decision="deny", reason=error.reason or error.code, rule=None)
    return record


def proxy_record(
    action: str,
    *,
    event_id: str,
    duration_ms: int,
    client_id: str | None,
    policy: Policy | None,
    decision: Decision | None,
    error: GatewayError | None = None,
    denied: bool = False,
    source: tuple[str, int] | None = None,
    url: str | None = None,
    destination: dict[str, Any] | None = None,
    method: str | None = None,
    status: int | None = None,
    response_bytes: int | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """One `proxy_http` or `proxy_connect` decision record."""
    if error is None and not denied:
        outcome, kind = "success", ["allowed"]
    else:
        outcome, kind = "failure", ["denied"] if denied else ["error"]
    record = _core(
        action,
        event_id=event_id,
        outcome=outcome,
        kind=kind,
        duration_ms=duration_ms,
        client_id=client_id,
        policy=None if policy is None else policy_block(policy, decision),
        trace_id=request_id,
    )
    if source is not None:
        record["source"] = {"ip": source[0], "port": source[1]}
    if url is not None:
        record["url"] = {"original": url}
    if destination is not None:
        record["destination"] = destination
    http: dict[str, Any] = {}
    if method is not None:
        http["request"] = {"method": method}
    if status is not None:
        response: dict[str, Any] = {"status_code": status}
        if response_bytes is not None:
            response["bytes"] = response_bytes
        http["response"] = response
    if http:
        record["http"] = http
    if error is not None:
        record["error"] = {"code": error.code, "message": error.message[:500]}
        if error.reason:
            record["error"]["reason"] = error.reason
    if policy is not None:
        mark_record(record, policy.dlp, decision.dlp if decision is not None else None)
    return record


def tunnel_close_record(
    *,
    event_id: str,
    client_id: str | None,
    policy: Policy,
    end: str,
    duration_ms: int,
    bytes_up: int,
    bytes_down: int,
    destination: dict[str, Any],
    tls_decision: Decision | None = None,
) -> dict[str, Any]:
    """The close of the tunnel whose `proxy_connect` record has the same `event.id` and
    `trace.id`; each fact once, in ECS names: how it ended in `event.reason`, its duration
    in `event.duration_ms`, bytes from the client in `source.bytes` and from upstream in
    `destination.bytes`."""
    denied = tls_decision is not None and not tls_decision.allowed
    record = _core(
        "tunnel_close",
        event_id=event_id,
        outcome="failure" if denied else "success",
        kind=["denied"] if denied else ["end"],
        duration_ms=duration_ms,
        client_id=client_id,
        policy=policy_block(policy, tls_decision)
        if tls_decision is not None
        else {"name": policy.name, "sha256": policy.sha256},
        # A proxy request's trace id is its event id (the X-Gateway-Request-Id it answered).
        trace_id=event_id,
    )
    record["event"]["reason"] = end
    record["destination"] = {**destination, "bytes": bytes_down}
    record["source"] = {"bytes": bytes_up}
    mark_record(record, policy.dlp, None)
    return record


def auth_failure_record(
    *,
    transport: str,
    message: str,
    client_hint: str | None,
    source: tuple[str, int] | None,
    request_id: str | None,
) -> dict[str, Any]:
    """A missing or unknown credential on the API, MCP or the proxy. `client_hint` is the
    user name a Basic credential claimed (never a token)."""
    record: dict[str, Any] = {
        "event": {
            "id": new_event_id(),
            "action": "auth_failure",
            "outcome": "failure",
            "type": ["denied"],
            "reason": message[:200],
        },
        "client": {"id": None, "claimed": client_hint[:100] if client_hint else None},
        "network": {"application": transport},
        "trace": {"id": request_id},
    }
    if source is not None:
        record["source"] = {"ip": source[0], "port": source[1]}
    return record
