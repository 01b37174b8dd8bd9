"""Reading the reviewer-facing facts out of an audit record (decision, client, domain, time),
tolerating records that lack a field or carry the wrong type: logs are read, never trusted.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from gateway.audit.chain import LIFECYCLE_ACTIONS


class Disposition(StrEnum):
    """What happened to a request, as reviewers count and filter it."""

    ALLOW = "allow"
    DENY = "deny"
    WOULD_DENY = "would_deny"  # report mode let a would-be denial pass
    ERROR = "error"  # allowed, but it failed (upstream unreachable, timeout, …)


_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z")


def section(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = record.get(name)
    return value if isinstance(value, Mapping) else {}


def text_field(mapping: Mapping[str, Any], name: str) -> str | None:
    value = mapping.get(name)
    return value if isinstance(value, str) else None


def int_field(mapping: Mapping[str, Any], name: str) -> int:
    value = mapping.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def action_of(record: Mapping[str, Any]) -> str | None:
    return text_field(section(record, "event"), "action")


def is_lifecycle(record: Mapping[str, Any]) -> bool:
    return action_of(record) in LIFECYCLE_ACTIONS


def client_of(record: Mapping[str, Any]) -> str | None:
    return text_field(section(record, "client"), "id")


def disposition_of(record: Mapping[str, Any]) -> Disposition:
    event = section(record, "event")
    policy = section(record, "policy")
    types = event.get("type")
    denied = policy.get("decision") == "deny" or (isinstance(types, list) and "denied" in types)
    if policy.get("enforced") is False and (denied or policy.get("reason")):
        return Disposition.WOULD_DENY
    if denied:
        return Disposition.DENY
    if event.get("outcome") == "failure":
        return Disposition.ERROR
    return Disposition.ALLOW


def domain_of(record: Mapping[str, Any]) -> str | None:
    domain = text_field(section(record, "destination"), "domain")
    if domain:
        return domain.lower()
    url = section(record, "url")
    raw = text_field(url, "full") or text_field(url, "original")
    if not raw:
        return None
    try:
        host = urlsplit(raw).hostname
    except ValueError:
        return None
    return host or None


def url_of(record: Mapping[str, Any]) -> str | None:
    url = section(record, "url")
    return text_field(url, "full") or text_field(url, "original")


def timestamp_of(record: Mapping[str, Any]) -> float | None:
    """`@timestamp` as seconds since the epoch, or None when absent or malformed."""
    value = record.get("@timestamp")
    if not isinstance(value, str):
        return None
    return parse_timestamp(value)


def parse_timestamp(value: str) -> float | None:
    match = _TIMESTAMP.fullmatch(value)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7)
    try:
        whole = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return whole + (float("0." + fraction) if fraction else 0.0)


def format_hour(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(int(seconds // 3600 * 3600)))


def format_time(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(seconds)))
