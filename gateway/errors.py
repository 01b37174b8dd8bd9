"""The gateway's exception tree: every failure an agent can see, with its wire code and status.

    GatewayError                      code                 HTTP
      InvalidRequestError             invalid_request      400  (reason: invalid_url, unknown_id, …)
      UnauthorizedError               unauthorized         401
      PolicyDeniedError               policy_denied        403  (carries the Decision)
      ToolDisabledError               tool_disabled        403  (carries the Decision)
      ReviewerTokenError              tool_disabled        403  (a reviewer's token: /review/ only)
      NotFoundError                   not_found            404
      WrongMethodError                wrong_method         405
      RequestTooLargeError            request_too_large    413
      RateLimitedError                rate_limited         429  (retry_after)
      ResponseTooLargeError           response_too_large   502
      UpstreamUnreachableError        upstream_unreachable 502
      UpstreamError                   upstream_error       502
      UnavailableError                unavailable          503  (retry_after)
      UpstreamTimeoutError            upstream_timeout     504
      AuditWriteError                 unavailable          503  (the audit log could not be written)
      InternalError                   internal_error       500  (a bug; the traceback is in the log)

Only adapters (server, cli) turn these into responses; everything below them raises them.
Foreign exceptions (aiohttp, OSError, lxml) are translated in one place per package.
A leaf: it imports nothing of the gateway. A refusal's decision and its text come to it as
values (`gateway.policy.hints.denied_error` writes the text).
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar


class GatewayError(Exception):
    code: ClassVar[str] = "internal_error"
    http_status: ClassVar[int] = 500
    # Set once a tool call's audit record names this error (tools/records.py), so the tool
    # registry writes a record only for refusals no tool recorded (one record per call).
    recorded: bool = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        rule: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.rule = rule
        self.retry_after = retry_after

    def to_dict(self, request_id: str | None = None) -> dict[str, Any]:
        """The API's error body, without the outer `{"error": …}`."""
        return {
            "code": self.code,
            "message": self.message,
            "reason": self.reason,
            "rule": self.rule,
            "request_id": request_id,
        }


class InvalidRequestError(GatewayError):
    code = "invalid_request"
    http_status = 400


class UnauthorizedError(GatewayError):
    code = "unauthorized"
    http_status = 401


class Ruling(Protocol):
    """What an error reads of a policy decision (`gateway.policy.engine.Decision` is one)."""

    @property
    def reason(self) -> str | None: ...

    @property
    def rule(self) -> str: ...


RulingT = TypeVar("RulingT", bound=Ruling)


class _DecisionError(GatewayError, Generic[RulingT]):
    """A refusal that a policy decision made; the decision travels with it, and `message` is
    what the agent reads of it (the caller writes it: `policy.hints.refusal_text`)."""

    def __init__(self, decision: RulingT, message: str) -> None:
        super().__init__(
            message,
            reason=str(decision.reason) if decision.reason else None,
            rule=decision.rule,
        )
        self.decision = decision


class PolicyDeniedError(_DecisionError[RulingT]):
    code = "policy_denied"
    http_status = 403


class ToolDisabledError(_DecisionError[RulingT]):
    code = "tool_disabled"
    http_status = 403


class ReviewerTokenError(GatewayError):
    """A reviewer's token used for anything but the review page: every tool is off for it."""

    code = "tool_disabled"
    http_status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="reviewer_token", rule="clients.role")


class NotFoundError(GatewayError):
    code = "not_found"
    http_status = 404


class WrongMethodError(GatewayError):
    code = "wrong_method"
    http_status = 405


class RequestTooLargeError(GatewayError):
    code = "request_too_large"
    http_status = 413


class RateLimitedError(GatewayError):
    code = "rate_limited"
    http_status = 429


class ResponseTooLargeError(GatewayError):
    """The body passed the policy's size cap; the cap is the rule that refused it."""

    code = "response_too_large"
    http_status = 502

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = "response_too_large",
        rule: str | None = "limits.max_response_bytes",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, reason=reason, rule=rule, retry_after=retry_after)


class UpstreamUnreachableError(GatewayError):
    code = "upstream_unreachable"
    http_status = 502


class UpstreamError(GatewayError):
    code = "upstream_error"
    http_status = 502


class UnavailableError(GatewayError):
    code = "unavailable"
    http_status = 503


class UpstreamTimeoutError(GatewayError):
    code = "upstream_timeout"
    http_status = 504


class AuditWriteError(UnavailableError):
    """The audit record could not be written, so the request is refused (fail closed)."""


class InternalError(GatewayError):
    """A bug, not a refusal: what the agent gets (and the audit log names) when a call fails
    with an exception no layer translated; the traceback goes to the operator's log only."""

    code = "internal_error"
    http_status = 500
