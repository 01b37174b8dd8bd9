"""What a reviewer asks the timeline for, read from the page's URL query: filters by client,
tool, decision (or the kind of a record that is no decision: `DECISION_CHOICES`), reason,
rule, domain and time range, the page size and the cursor of the page before. Each filter
also names the literal bytes a matching line must hold, so the reader can skip every other
line without parsing it (`backward`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.audit.fields import (
    Disposition,
    action_of,
    client_of,
    disposition_of,
    domain_of,
    format_time,
    is_lifecycle,
    section,
    text_field,
)
from gateway.audit.summary import RecordKind, kind_of, parse_since

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 100
RELOAD_ACTION = "policy_reload"
MAX_FILTER_CHARS = 512
# Lines that can be a reload or a report-mode pass, as the writer spells them.
RELOAD_NEEDLE = b'"policy_reload"'
_DECISION_NEEDLES: dict[str, tuple[bytes, ...]] = {
    Disposition.DENY: (b'"deny"', b'"denied"'),
    Disposition.WOULD_DENY: (b'"enforced":false',),
    Disposition.ERROR: (b'"failure"',),
    RecordKind.MALFORMED: (b'"invalid_request"', b'"bad_request"'),
    RecordKind.AUTH_CHALLENGE: (b'"auth_failure"',),
    RecordKind.AUTH_FAILURE: (b'"auth_failure"',),
    RecordKind.TUNNEL_CLOSE: (b'"tunnel_close"',),
}
# What the decision column and filter show: a decision, or what a record deciding nothing is.
DECISION_CHOICES = (
    *(d.value for d in Disposition),
    *(k.value for k in RecordKind if k is not RecordKind.DECISION),
)


def decision_label(record: Mapping[str, Any]) -> str:
    """The record's decision (`allow`, `deny`, …) or, for a record that decides nothing, its
    kind (`malformed_request`, `auth_challenge`, `auth_failure`, `tunnel_close`)."""
    kind = kind_of(record)
    return disposition_of(record).value if kind is RecordKind.DECISION else kind.value


TEXT_FILTERS = ("client", "tool", "decision", "reason", "rule", "domain")


class QueryError(ValueError):
    """A filter value the page cannot use; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the previous page stopped: the last record shown, in the timeline's order."""

    timestamp: float
    instance: str
    seq: int

    def encode(self) -> str:
        return f"{self.timestamp:.3f}~{self.seq}~{self.instance}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        moment, _, rest = text.partition("~")
        seq, _, instance = rest.partition("~")
        try:
            return cls(float(moment), instance, int(seq))
        except ValueError:
            raise QueryError("before: not a cursor from this page's 'older' link") from None


@dataclass(frozen=True, slots=True)
class Query:
    client: str | None = None
    tool: str | None = None
    decision: str | None = None
    reason: str | None = None
    rule: str | None = None
    domain: str | None = None
    since: float | None = None
    until: float | None = None
    before: Cursor | None = None
    limit: int = DEFAULT_PAGE_SIZE
    since_text: str | None = None  # as typed, for the form and the links
    until_text: str | None = None

    @property
    def filtered(self) -> bool:
        return any(getattr(self, name) for name in TEXT_FILTERS)

    def params(self, **changes: Any) -> dict[str, str]:
        """The URL query that asks for this view (with `changes`): what links carry."""
        query = replace(self, **changes) if changes else self
        out = {name: getattr(query, name) for name in TEXT_FILTERS if getattr(query, name)}
        if query.since_text:
            out["since"] = query.since_text
        if query.until_text:
            out["until"] = query.until_text
        if query.before is not None:
            out["before"] = query.before.encode()
        if query.limit != DEFAULT_PAGE_SIZE:
            out["limit"] = str(query.limit)
        return out

    def needles(self) -> tuple[tuple[bytes, ...], ...]:
        """For each filter, the byte strings one of which a matching line must hold."""
        groups: list[tuple[bytes, ...]] = []
        for value in (self.client, self.tool, self.reason, self.rule):
            if value:
                groups.append((orjson.dumps(value),))
        if self.domain:
            groups.append((orjson.dumps(self.domain)[1:-1],))
        if self.decision in _DECISION_NEEDLES:
            groups.append(_DECISION_NEEDLES[self.decision])
        return tuple(groups)

    def scan_needles(self) -> tuple[bytes, ...]:
        """What the reader searches for: the longest single-string filter, or (with none) no
        search at all; policy reloads are always wanted, so their marker joins the search."""
        singles = [group[0] for group in self.needles() if len(group) == 1]
        if not singles:
            groups = self.needles()
            return (*groups[0], RELOAD_NEEDLE) if groups else ()
        return (max(singles, key=len), RELOAD_NEEDLE)

    def line_may_match(self, line: bytes) -> bool:
        return RELOAD_NEEDLE in line or all(
            any(needle in line for needle in group) for group in self.needles()
        )

    def matches(self, record: Mapping[str, Any]) -> bool:
        """Whether the timeline shows this record (time bounds are the reader's): every
        filter holds, or it is a policy reload, which the timeline always marks."""
        action = action_of(record)
        if action == RELOAD_ACTION:
            return True
        if is_lifecycle(record) and self.filtered:
            return False
        if self.client and client_of(record) != self.client:
            return False
        if self.tool and action != self.tool:
            return False
        if self.decision and (is_lifecycle(record) or decision_label(record) != self.decision):
            return False
        policy = section(record, "policy")
        if self.reason and text_field(policy, "reason") != self.reason:
            return False
        if self.rule and text_field(policy, "rule") != self.rule:
            return False
        if self.domain:
            domain = domain_of(record) or ""
            if domain != self.domain and not domain.endswith("." + self.domain):
                return False
        return True


def parse_query(params: Mapping[str, str], *, now: float | None = None) -> Query:
    """The timeline's URL query -> Query; QueryError names the first bad value."""
    now = time.time() if now is None else now
    values: dict[str, Any] = {}
    for name in TEXT_FILTERS:
        raw = params.get(name, "").strip()
        if len(raw) > MAX_FILTER_CHARS:
            raise QueryError(f"{name}: longer than {MAX_FILTER_CHARS} characters")
        values[name] = raw or None
    if values["decision"] and values["decision"] not in DECISION_CHOICES:
        raise QueryError(f"decision: one of {', '.join(DECISION_CHOICES)}")
    if values["domain"]:
        values["domain"] = values["domain"].lower().rstrip(".")
    for name in ("since", "until"):
        raw = params.get(name, "").strip()
        if raw:
            try:
                values[name] = parse_since(raw, now=now)
            except ValueError:
                raise QueryError(
                    f"{name}: a duration before now (24h, 30m, 7d) or a UTC time "
                    "(2026-11-30T06:00:00Z)"
                ) from None
            values[f"{name}_text"] = raw
    before = params.get("before", "").strip()
    if before:
        values["before"] = Cursor.decode(before)
    limit = params.get("limit", "").strip()
    if limit:
        if not limit.isdigit() or int(limit) not in PAGE_SIZES:
            raise QueryError("limit: one of " + ", ".join(str(n) for n in PAGE_SIZES))
        values["limit"] = int(limit)
    return Query(**values)


def describe_time(seconds: float | None) -> str:
    return format_time(seconds) if seconds is not None else "-"
