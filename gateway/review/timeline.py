"""The timeline: the records of every chain in the folder, newest first, filtered and paged;
and what a record without a client had instead (`why_no_client`).

Each chain is read backwards from where the page starts (the end, the `until` bound or the
previous page's cursor) down to the `since` bound, both found by bisection, and the chains
are merged by time. A page costs
the records it shows plus the lines skipped to find them, never the size of the log; with
filters the skipped lines are only searched for the filter's bytes, not parsed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.audit.chain import chain_link
from gateway.audit.fields import (
    action_of,
    client_of,
    is_lifecycle,
    section,
    text_field,
    timestamp_of,
)
from gateway.review.backward import lines_backwards, offset_after
from gateway.review.files import AuditFolder, Chain, LogFile
from gateway.review.query import RELOAD_ACTION, Cursor, Query


@dataclass(frozen=True, slots=True)
class Entry:
    """One record as the timeline lists it, with where it is written."""

    timestamp: float
    instance: str
    seq: int
    file: str  # the file's name in the audit folder
    offset: int
    record: dict[str, Any]

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.timestamp, self.instance, self.seq)


@dataclass(frozen=True, slots=True)
class Page:
    entries: tuple[Entry, ...]
    older: Cursor | None  # the cursor of the next (older) page, when there are more records
    chains: int
    files: int


def timeline(folder: AuditFolder, query: Query) -> Page:
    chains = folder.chains()
    streams = [_chain_entries(chain, query) for chain in chains]
    merged = heapq.merge(*streams, key=_order, reverse=True)
    shown = list(itertools.islice(merged, query.limit + 1))
    more = len(shown) > query.limit
    shown = shown[: query.limit]
    return Page(
        tuple(shown),
        shown[-1].cursor if more and shown else None,
        len(chains),
        sum(len(chain.files) for chain in chains),
    )


def _order(entry: Entry) -> tuple[float, str, int]:
    return entry.timestamp, entry.instance, entry.seq


def _upper_bound(query: Query) -> float | None:
    bounds = [b for b in (query.until, query.before.timestamp if query.before else None) if b]
    return min(bounds) if bounds else None


def _chain_entries(chain: Chain, query: Query) -> Iterator[Entry]:
    """The chain's matching records, newest first, within the query's bounds."""
    bound = _upper_bound(query)
    before = query.before
    needles = query.scan_needles()
    newer = float("inf")  # the time of the record after the current one
    for file in reversed(chain.files):
        try:
            end = offset_after(file.path, bound) if bound is not None else None
            # Records at `since` or later (timestamps have millisecond precision).
            begin = offset_after(file.path, query.since - 0.0005) if query.since else 0
        except FileNotFoundError:  # rotated away meanwhile
            continue
        if end == 0 or (end is not None and begin >= end):
            continue
        for entry in _file_entries(file, chain.instance, begin, end, needles, query, newer):
            newer = entry.timestamp
            if query.since is not None and entry.timestamp < query.since:
                return
            if before is not None and _order(entry) >= (
                before.timestamp,
                before.instance,
                before.seq,
            ):
                continue
            if query.matches(entry.record):
                yield entry


def _file_entries(
    file: LogFile,
    instance: str,
    begin: int,
    end: int | None,
    needles: tuple[bytes, ...],
    query: Query,
    newer: float,
) -> Iterator[Entry]:
    try:
        lines = lines_backwards(file.path, begin=begin, end=end, needles=needles)
        for offset, line in lines:
            if needles and not query.line_may_match(line):
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            link = chain_link(record)
            if link is None:  # a torn or foreign line: the chain view reports those
                continue
            seen = timestamp_of(record)
            # A record without a readable time sorts with the newer one next to it.
            if seen is None:
                seen = newer if newer != float("inf") else 0.0
            newer = seen
            yield Entry(
                seen,
                instance,
                link.seq,
                file.name,
                offset,
                record,
            )
    except FileNotFoundError:  # rotated away while reading: its lines are in the new name
        return


def why_no_client(record: dict[str, Any], *, clients_configured: bool) -> str | None:
    """Why a record names no client (None when it names one): a refused credential, no clients
    configured, or a proxy request refused before its credential was read."""
    if client_of(record) is not None:
        return None
    action = action_of(record)
    if is_lifecycle(record) or action == RELOAD_ACTION:
        return "no client: a record of the gateway itself"
    if action == "auth_failure":
        claimed = text_field(section(record, "client"), "claimed")
        return "no client: unauthenticated" + (f" (claimed {claimed})" if claimed else "")
    # A decision's record names a client whenever clients are configured; one with a policy
    # and no client was made without them (then, if not now).
    if not clients_configured or section(record, "policy"):
        return "no client: no clients configured"
    return "no client: refused before authentication"
