"""Who is calling and under which policy: passed explicitly to every tool call."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from gateway.policy.model import Policy


@dataclass(frozen=True, slots=True)
class CallContext:
    policy: Policy  # fixed for the whole call, even if a reload happens meanwhile
    client_id: str | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.monotonic)

    @property
    def client_label(self) -> str:
        return self.client_id or "anonymous"

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)
