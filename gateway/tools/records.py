"""Audit records of tool calls, in ECS field names. Built here, written by audit.

URLs are redacted by the audit log itself; nothing here copies headers or bodies.
"""

from __future__ import annotations

import os
from typing import Any

from gateway.errors import GatewayError, PolicyDeniedError, ToolDisabledError
from gateway.policy.dlprecords import mark_record
from gateway.policy.engine import Decision
from gateway.policy.model import Policy
from gateway.tools.context import CallContext


def policy_block(policy: Policy, decision: Decision | None) -> dict[str, Any]:
    block: dict[str, Any] = {"name": policy.name, "sha256": policy.sha256}
    if decision is None:
        block.update({"decision": "allow", "enforced": True, "rule": None, "reason": None})
    else:
        block.update(decision.to_dict())
        block.pop("message", None)
    return block


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
    record: dict[str, Any] = {
        "event": {
            # A call without an envelope still gets an id of the same form (32 hex digits).
            "id": event_id or os.urandom(16).hex(),
            "action": action,
            "outcome": outcome,
            "type": kind,
            "duration_ms": ctx.elapsed_ms,
        },
        "client": {"id": ctx.client_label},
        "policy": policy_block(ctx.policy, decision),
        "trace": {"id": ctx.request_id},
    }
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
