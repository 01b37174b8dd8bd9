"""`audit summary`: what reviewers ask of a log, in one pass and bounded memory (counters per
domain, client and hour): totals by disposition and tool, top denied domains, a per-client
table, deny reasons, an hourly timeline, and injection signals per domain.

Decisions are counted, not records (`kind_of`): a malformed request (`invalid_request`, the
proxy's `bad_request`) was refused before any rule looked at it, an `auth_failure` is a
missing credential (the challenge every proxy client meets first: git, pip and curl send
credentials only after a 407) or a wrong one, and a `tunnel_close` ends a tunnel whose
decision is its `proxy_connect` record. Each has its own count, apart from the decisions;
only a tunnel that the TLS checks refused (`not_tls`, `sni_mismatch`) is a decision there.

Injection signals come from an optional field the tools put on records of fetched content:
`"sanitized": {"marker_lookalikes": n, "invisible_chars": n}`, the counts that
`provenance.sanitize` neutralised in that content (look-alikes of the
untrusted-content markers, invisible or bidi characters). Absent or zero means none found.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from gateway.audit.fields import (
    Disposition,
    action_of,
    client_of,
    disposition_of,
    domain_of,
    format_hour,
    format_time,
    int_field,
    is_lifecycle,
    parse_timestamp,
    section,
    text_field,
    timestamp_of,
)
from gateway.audit.lines import iter_lines

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Distinct domains are counted exactly up to this many per client, so memory stays bounded.
_MAX_DISTINCT_PER_CLIENT = 100_000


class RecordKind(StrEnum):
    """What a record is, for counting: a decision, or one of the records that are not."""

    DECISION = "decision"
    MALFORMED = "malformed_request"  # refused before any rule: the request itself was bad
    AUTH_CHALLENGE = "auth_challenge"  # no credential sent (clients retry with one)
    AUTH_FAILURE = "auth_failure"  # a credential was sent and it was refused
    TUNNEL_CLOSE = "tunnel_close"  # the end of a tunnel already counted at its CONNECT


# The error codes of a request refused for its form: the API's and the proxy parser's.
MALFORMED_CODES = frozenset({"invalid_request", "bad_request"})
# The starts of the messages an `auth_failure` record carries when no credential came at all
# (proxy, API and MCP, review login form), as gateway/server/proxy/auth.py, gateway/runtime.py
# and gateway/server/review/access.py word them.
NO_CREDENTIAL_MESSAGES = (
    "proxy credentials required",
    "missing bearer token",
    "no token given",
)


def kind_of(record: Mapping[str, Any]) -> RecordKind:
    """A record's kind; a URL that does not parse stays a decision (the policy's rule `url`)."""
    action = action_of(record)
    if action == "auth_failure":
        message = text_field(section(record, "event"), "reason") or ""
        if message.startswith(NO_CREDENTIAL_MESSAGES):
            return RecordKind.AUTH_CHALLENGE
        return RecordKind.AUTH_FAILURE
    if action == "tunnel_close":
        denied = section(record, "policy").get("decision") == "deny"
        return RecordKind.DECISION if denied else RecordKind.TUNNEL_CLOSE
    code = text_field(section(record, "error"), "code")
    if code in MALFORMED_CODES and text_field(section(record, "policy"), "reason") != "invalid_url":
        return RecordKind.MALFORMED
    return RecordKind.DECISION


def failures_in(record: Mapping[str, Any]) -> int:
    """How many failed authentications an `auth_failure` record stands for: one, or the
    `event.count` of a window's repeated failures from one address, written as one record."""
    count = section(record, "event").get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def parse_since(text: str, *, now: float) -> float:
    """`24h`, `30m`, `7d`, `2w`, `90s` (before `now`) or an ISO 8601 UTC time; ValueError else."""
    value = text.strip()
    match = _DURATION.fullmatch(value.lower())
    if match:
        return now - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    for candidate in (value, value + "Z", value + ":00Z", value + "T00:00:00Z"):
        parsed = parse_timestamp(candidate)
        if parsed is not None:
            return parsed
    raise ValueError(
        f"--since {text!r}: expected a duration such as 24h, 30m, 7d, or a UTC time such as "
        "2026-11-30T06:00:00Z"
    )


@dataclass(slots=True)
class _DomainDenials:
    count: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    first_seen: float | None = None
    last_seen: float | None = None


@dataclass(slots=True)
class _ClientStats:
    requests: int = 0
    denials: int = 0
    errors: int = 0
    malformed: int = 0
    bytes: int = 0
    domains: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Signals:
    records: int = 0
    marker_lookalikes: int = 0
    invisible_chars: int = 0


class Summariser:
    """Feed records with `add`, read the summary with `result`."""

    def __init__(self, *, since: float | None = None, client: str | None = None) -> None:
        self.since = since
        self.client = client
        self.records = 0
        self.skipped_lines = 0
        self.first: float | None = None
        self.last: float | None = None
        self.totals: Counter[str] = Counter()
        self.by_tool: dict[str, Counter[str]] = {}
        self.denied_domains: dict[str, _DomainDenials] = {}
        self.clients: dict[str, _ClientStats] = {}
        self.deny_reasons: Counter[str] = Counter()
        self.timeline: dict[str, Counter[str]] = {}
        self.signals: dict[str, _Signals] = {}
        self.kinds: Counter[RecordKind] = Counter()
        self.malformed_by_tool: Counter[str] = Counter()

    def add(self, record: Mapping[str, Any]) -> None:
        if is_lifecycle(record):
            return
        client = client_of(record)
        if self.client is not None and client != self.client:
            return
        seen = timestamp_of(record)
        if self.since is not None and (seen is None or seen < self.since):
            return
        self.records += 1
        if seen is not None:
            self.first = seen if self.first is None else min(self.first, seen)
            self.last = seen if self.last is None else max(self.last, seen)
        kind = kind_of(record)
        self.kinds[kind] += failures_in(record) if kind is RecordKind.AUTH_FAILURE else 1
        if kind in (RecordKind.AUTH_CHALLENGE, RecordKind.AUTH_FAILURE, RecordKind.TUNNEL_CLOSE):
            return  # not a request decided: counted apart, above
        tool = action_of(record) or "unknown"
        domain = domain_of(record)
        stats = self.clients.setdefault(client or "-", _ClientStats())
        stats.requests += 1
        if domain and len(stats.domains) < _MAX_DISTINCT_PER_CLIENT:
            stats.domains.add(domain)
        if kind == RecordKind.MALFORMED:
            stats.malformed += 1
            self.malformed_by_tool[tool] += 1
            return
        disposition = disposition_of(record)
        if seen is not None:
            self.timeline.setdefault(format_hour(seen), Counter())[disposition] += 1
        policy = section(record, "policy")
        self.totals[disposition] += 1
        self.by_tool.setdefault(tool, Counter())[disposition] += 1

        stats.bytes += int_field(section(section(record, "http"), "response"), "bytes")
        if disposition == Disposition.ERROR:
            stats.errors += 1
        if disposition == Disposition.DENY:
            stats.denials += 1
            reason = text_field(policy, "reason") or "unspecified"
            self.deny_reasons[reason] += 1
            denied = self.denied_domains.setdefault(domain or "-", _DomainDenials())
            denied.count += 1
            denied.rules[text_field(policy, "rule") or "-"] += 1
            denied.reasons[reason] += 1
            if seen is not None:
                if denied.first_seen is None or seen < denied.first_seen:
                    denied.first_seen = seen
                if denied.last_seen is None or seen > denied.last_seen:
                    denied.last_seen = seen

        sanitized = section(record, "sanitized")
        lookalikes = int_field(sanitized, "marker_lookalikes")
        invisible = int_field(sanitized, "invisible_chars")
        if lookalikes or invisible:
            signals = self.signals.setdefault(domain or "-", _Signals())
            signals.records += 1
            signals.marker_lookalikes += lookalikes
            signals.invisible_chars += invisible

    def result(self, *, top: int = 10) -> dict[str, Any]:
        denied = sorted(self.denied_domains.items(), key=lambda item: (-item[1].count, item[0]))
        signals = sorted(
            self.signals.items(),
            key=lambda item: (-(item[1].marker_lookalikes + item[1].invisible_chars), item[0]),
        )
        return {
            "window": {
                "since": format_time(self.since) if self.since is not None else None,
                "first": format_time(self.first) if self.first is not None else None,
                "last": format_time(self.last) if self.last is not None else None,
            },
            "client": self.client,
            "records": self.records,
            "skipped_lines": self.skipped_lines,
            "decisions": self.kinds[RecordKind.DECISION],
            "totals": {d.value: self.totals.get(d, 0) for d in Disposition},
            "not_decisions": {
                "malformed_requests": self.kinds[RecordKind.MALFORMED],
                "auth_challenges": self.kinds[RecordKind.AUTH_CHALLENGE],
                "auth_failures": self.kinds[RecordKind.AUTH_FAILURE],
                "tunnel_closes": self.kinds[RecordKind.TUNNEL_CLOSE],
            },
            "tools": {
                tool: {
                    **{d.value: self.by_tool.get(tool, Counter()).get(d, 0) for d in Disposition},
                    "malformed": self.malformed_by_tool.get(tool, 0),
                }
                for tool in sorted({*self.by_tool, *self.malformed_by_tool})
            },
            "top_denied_domains": [
                {
                    "domain": domain,
                    "count": entry.count,
                    "rule": entry.rules.most_common(1)[0][0],
                    "reason": entry.reasons.most_common(1)[0][0],
                    "first_seen": _time_or_none(entry.first_seen),
                    "last_seen": _time_or_none(entry.last_seen),
                }
                for domain, entry in denied[:top]
            ],
            "clients": [
                {
                    "id": client,
                    "requests": stats.requests,
                    "denials": stats.denials,
                    "errors": stats.errors,
                    "malformed": stats.malformed,
                    "distinct_domains": len(stats.domains),
                    "bytes": stats.bytes,
                }
                for client, stats in sorted(
                    self.clients.items(), key=lambda item: (-item[1].requests, item[0])
                )
            ],
            "deny_reasons": dict(self.deny_reasons.most_common()),
            "timeline": [
                {"hour": hour, **{d.value: counts.get(d, 0) for d in Disposition}}
                for hour, counts in sorted(self.timeline.items())
            ],
            "injection_signals": [
                {
                    "domain": domain,
                    "records": entry.records,
                    "marker_lookalikes": entry.marker_lookalikes,
                    "invisible_chars": entry.invisible_chars,
                }
                for domain, entry in signals[:top]
            ],
        }


def read_records(
    paths: Sequence[str], counter: Summariser | None = None
) -> Iterator[dict[str, Any]]:
    """Every JSON object line of the files in order; other lines are counted as skipped."""
    for path in paths:
        with open(path, "rb") as handle:
            for line in iter_lines(handle):
                record: Any = None
                if line.data is not None:
                    try:
                        record = orjson.loads(line.data)
                    except orjson.JSONDecodeError:
                        record = None
                if isinstance(record, dict):
                    yield record
                elif counter is not None:
                    counter.skipped_lines += 1


def summarise(
    records: Iterable[Mapping[str, Any]],
    *,
    since: float | None = None,
    client: str | None = None,
    top: int = 10,
) -> dict[str, Any]:
    summariser = Summariser(since=since, client=client)
    for record in records:
        summariser.add(record)
    return summariser.result(top=top)


def summarise_files(
    paths: Sequence[str],
    *,
    since: float | None = None,
    client: str | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """Raises OSError when a file cannot be read."""
    summariser = Summariser(since=since, client=client)
    for record in read_records(paths, summariser):
        summariser.add(record)
    return summariser.result(top=top)


def _time_or_none(seconds: float | None) -> str | None:
    return format_time(seconds) if seconds is not None else None
