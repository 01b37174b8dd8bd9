"""Values that go into envelopes and provenance headers, normalised and capped.

Everything here came from upstream or from the agent, so nothing passes through unchecked:
content types are cut to the bare media type and charset, URLs are re-quoted, lengths capped.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from typing import Any

import yarl

from gateway.errors import GatewayError, InvalidRequestError, PolicyDeniedError, ToolDisabledError
from gateway.policy.engine import Decision, Reason
from gateway.policy.hints import refusal_text
from gateway.provenance.markers import source_attribute

MAX_URL_CHARS = 2048
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")


_second_stamp: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """UTC with milliseconds and a Z, as every timestamp the gateway writes."""
    global _second_stamp
    now = time.time()
    second, stamp = _second_stamp
    if second != int(now):  # strftime is most of the cost: once a second is enough
        second = int(now)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_stamp = (second, stamp)
    return f"{stamp}.{int(now % 1 * 1000):03d}Z"


def new_id() -> str:
    return uuid.uuid4().hex


def normalize_content_type(raw: str | None) -> str | None:
    """`text/HTML; Charset="UTF-8"; x=y` -> `text/html; charset=utf-8`; junk -> None."""
    if not raw:
        return None
    media, _, params = raw.partition(";")
    kind, _, subtype = media.strip().partition("/")
    if not _TOKEN.fullmatch(kind) or not _TOKEN.fullmatch(subtype):
        return None
    out = f"{kind.lower()}/{subtype.lower()}"
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            value = value.strip().strip('"').lower()
            if _TOKEN.fullmatch(value):
                out += f"; charset={value}"
            break
    return out


def display_url(url: str | yarl.URL) -> str:
    """A URL re-quoted in percent-encoded form (no <, >, quotes, spaces, controls), capped."""
    text = str(url)
    if not isinstance(url, yarl.URL):  # a yarl.URL prints in its quoted form already
        with contextlib.suppress(ValueError):
            text = str(yarl.URL(text))
    return source_attribute(text)[:MAX_URL_CHARS]


def refusal(decision: Decision) -> GatewayError:
    """The error an agent sees for a refused request URL (not a redirect hop)."""
    if decision.reason is Reason.INVALID_URL:
        return InvalidRequestError(
            f"invalid URL: {decision.detail or 'it does not parse'}",
            reason="invalid_url",
            rule="url",
        )
    if decision.reason is Reason.TOOL_DISABLED:
        return ToolDisabledError(decision, refusal_text(decision))
    return PolicyDeniedError(decision, refusal_text(decision))


def policy_summary(decision: Decision, mode: str) -> dict[str, Any]:
    """The envelope's `policy` block."""
    return {
        "name": decision.policy_name,
        "sha256": decision.policy_sha256,
        "mode": mode,
        "rule": decision.rule,
    }
