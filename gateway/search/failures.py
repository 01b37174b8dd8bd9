"""How a provider failed: the error classes shown in warnings, `ProviderError`, and key scrubbing.

Every message that leaves the search layer goes through `scrub_secrets` first, so an upstream
that echoes the API key back can never leak it into a warning, an error or a log line.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from urllib.parse import quote, quote_plus


class ErrorClass(StrEnum):
    TIMEOUT = "timeout"
    NETWORK = "network"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    HTTP_4XX = "http_4xx"
    INVALID_RESPONSE = "invalid_response"
    BUDGET_EXHAUSTED = "budget_exhausted"
    # Not a failure of the provider (its health counts it a success), but the chain moves on.
    NO_RESULTS = "no_results"


class ProviderError(Exception):
    """A provider answered, or failed to answer, in a way that yields no results."""

    def __init__(
        self, error_class: ErrorClass, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"[{error_class}] {message}")
        self.error_class = error_class
        self.message = message
        self.retry_after = retry_after


REDACTED = "[redacted]"
# Keys shorter than this are too likely to match ordinary text; real provider keys are far longer.
_MIN_SECRET_LENGTH = 6


def scrub_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every secret, raw or percent-encoded, with a fixed placeholder."""
    for secret in secrets:
        if not secret or len(secret) < _MIN_SECRET_LENGTH:
            continue
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            text = text.replace(form, REDACTED)
    return text
