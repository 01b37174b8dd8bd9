"""Failed credentials, recorded and throttled per source address, so a flood of bad tokens
cannot flood the audit log. The first failure of an address (per transport and claimed
client) in a window is recorded at once; the window's later ones are counted and written
as one `auth_failure` record with `event.count`, `event.start` and `event.end` when the
window ends (at the next failure after it, or the periodic `flush`). An address past
`budget` failures in its window is throttled: its failed requests answer 429 (with the
window's end as Retry-After) instead of 401 until the window ends. A valid credential is
never throttled. Decides nothing about who the client is: it is told what failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.audit.chain import format_timestamp
from gateway.audit.log import AuditLog
from gateway.tools.records import auth_failure_record

WINDOW_S = 60.0
BUDGET = 20  # failures of one address in a window before it is throttled
MAX_ADDRESSES = 10_000  # windows held at once; past it, the oldest are written out early

_Key = tuple[str, str, str | None]  # source address, transport, claimed client


@dataclass(slots=True)
class _Window:
    started: float  # monotonic
    started_at: float  # wall clock, for the record
    last_at: float
    failures: int  # every failure in the window, the first (recorded at once) included
    pending: int  # failures counted but not on record yet
    message: str
    source: tuple[str, int] | None
    request_id: str | None


class AuthFailureRecorder:
    def __init__(
        self,
        audit: AuditLog,
        *,
        window: float = WINDOW_S,
        budget: int = BUDGET,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._audit = audit
        self._window = window
        self._budget = budget
        self._clock = clock
        self._wall = wall_clock
        self._windows: dict[_Key, _Window] = {}

    def failed(
        self,
        *,
        transport: str,
        message: str,
        client_hint: str | None,
        source: tuple[str, int] | None,
        request_id: str | None,
    ) -> float | None:
        """Count one failed credential; None, or the seconds until the address's window ends
        when it is throttled. Raises AuditWriteError when a record due now cannot be written."""
        now, wall = self._clock(), self._wall()
        key = (source[0] if source else "", transport, client_hint)
        window = self._windows.get(key)
        if window is not None and now - window.started >= self._window:
            self._close(key, window)
            window = None
        if window is None:
            if len(self._windows) >= MAX_ADDRESSES:
                oldest = next(iter(self._windows))
                self._close(oldest, self._windows[oldest])
            self._windows[key] = _Window(now, wall, wall, 1, 0, message, source, request_id)
            self._audit.append(
                auth_failure_record(
                    transport=transport,
                    message=message,
                    client_hint=client_hint,
                    source=source,
                    request_id=request_id,
                )
            )
            return None
        window.failures += 1
        window.pending += 1
        window.last_at, window.message = wall, message
        window.source, window.request_id = source, request_id
        if window.failures > self._budget:
            return max(window.started + self._window - now, 0.001)
        return None

    def flush(self, *, everything: bool = False) -> None:
        """Write the counts of windows that ended (every window's, at shutdown)."""
        now = self._clock()
        for key, window in list(self._windows.items()):
            if everything or now - window.started >= self._window:
                self._close(key, window)

    def _close(self, key: _Key, window: _Window) -> None:
        del self._windows[key]
        if window.pending == 0:
            return
        _, transport, client_hint = key
        record: dict[str, Any] = auth_failure_record(
            transport=transport,
            message=window.message,
            client_hint=client_hint,
            source=window.source,
            request_id=window.request_id,
        )
        # The failures after the first (which has its own record), as one record.
        record["event"].update(
            count=window.pending,
            start=format_timestamp(window.started_at),
            end=format_timestamp(window.last_at),
        )
        self._audit.append(record)
