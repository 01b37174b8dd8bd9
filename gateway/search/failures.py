"""How a provider failed: the error classes shown in warnings, `ProviderError`, and key scrubbing.

Every message that leaves the search layer goes through `scrub_secrets` first, so an upstream
that echoes the API key back can never leak it into a warning, an error or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum


class ErrorClass(StrEnum):
    TIMEOUT = "timeout"
    NETWORK = "network"
    RATE_LIMITED = "rate_limited"
    # A captcha or an anti-bot page: the engine refuses this address for a while; cools as a
    # rate limit does.
    BLOCKED = "blocked"
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
        # The HTTP status of the answer it was read from (set by the chain), if any.
        self.status: int | None = None


REDACTED = "[redacted]"
# Keys shorter than this are too likely to match ordinary text; real provider keys are far longer.
_MIN_SECRET_LENGTH = 6


def scrub_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every secret with a placeholder: in any letter case, any character of it
    written as itself or percent-encoded (an upstream may echo the key from a URL)."""
    usable = {s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH}
    # Longest first, so a key that contains another key is replaced whole.
    for secret in sorted(usable, key=len, reverse=True):
        text = _secret_pattern(secret).sub(REDACTED, text)
    return text


def _secret_pattern(secret: str) -> re.Pattern[str]:
    pieces = []
    for char in secret:
        encoded = "".join(f"%{byte:02x}" for byte in char.encode("utf-8"))
        pieces.append(f"(?:{re.escape(char)}|{re.escape(encoded)})")
    return re.compile("".join(pieces), re.IGNORECASE)
