"""Prometheus metrics of one gateway process: one `CollectorRegistry`, owned by `Services`.

Every label value is bounded: tools, decisions and reasons come from fixed lists, clients from
the configuration (anything else is "anonymous"), routes from the router; never a URL or a
host. Observing never raises into a request and never decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway import errors
from gateway.audit.log import AuditLog
from gateway.errors import AuditWriteError
from gateway.policy.engine import Reason

log = logging.getLogger("gateway.metrics")

ACTIONS = frozenset(
    {
        "WebFetch",
        "WebSearch",
        "XSearch",
        "Research",
        "proxy_http",
        "proxy_connect",
        "tunnel_close",
        "auth_failure",
    }
)
DECISIONS = frozenset({"allow", "deny"})
OUTCOMES = frozenset({"success", "failure"})
ERROR_CODES = frozenset(
    cls.code
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.GatewayError)
)
REASONS = frozenset(str(r) for r in Reason) | ERROR_CODES | {"unknown_id", "rate_limited"}
ANONYMOUS = "anonymous"
OTHER = "other"
NONE = "none"
PROVIDER_STATES = ("untested", "healthy", "degraded", "cooling")
REFRESH_TIMEOUT_S = 1.0

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BYTES_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
AUDIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5)

Refresher = Callable[[], Awaitable[None]]


def _bounded(value: object, allowed: frozenset[str]) -> str:
    if value is None:
        return NONE
    text = str(value)
    return text if text in allowed else OTHER


class _SearchStats(Collector):
    """Search provider states and cache counters, as last read at scrape time."""

    def __init__(self) -> None:
        self.providers: list[tuple[str, str]] = []
        self.cache: Mapping[str, int] | None = None

    def collect(self) -> Iterator[Any]:
        states = GaugeMetricFamily(
            "gateway_search_provider_state",
            "Search provider health (1 for the provider's current state)",
            labels=["provider", "state"],
        )
        for provider, current in self.providers:
            for state in PROVIDER_STATES:
                states.add_metric([provider, state], 1.0 if state == current else 0.0)
        yield states
        if self.cache is not None:
            for name in ("hits", "misses"):
                counter = CounterMetricFamily(
                    f"gateway_search_cache_{name}", f"Search cache {name} seen by this process"
                )
                counter.add_metric([], float(self.cache.get(name, 0)))
                yield counter
            entries = GaugeMetricFamily("gateway_search_cache_entries", "Search cache entries")
            entries.add_metric([], float(self.cache.get("entries", 0)))
            yield entries


class Metrics:
    """The process's metrics. `render()` refreshes the scrape-time values, then serialises."""

    def __init__(self, *, instance_id: str, version: str, shared_state: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._clients: frozenset[str] = frozenset()
        # Plain counts beside the gauges, for the drain to wait on.
        self.requests_in_flight = 0
        self.tunnels_open = 0
        self._refreshers: list[Refresher] = []
        self._search = _SearchStats()
        r.register(self._search)
        info = Gauge("gateway_info", "Version and instance", ["version", "instance"], registry=r)
        info.labels(version, instance_id).set(1)
        self.decisions = Counter(
            "gateway_decisions",
            "Audited decisions by tool, decision, reason and client",
            ["tool", "decision", "reason", "client"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "gateway_tool_duration_seconds",
            "Time from a call's start to its audit record, by tool",
            ["tool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_bytes = Histogram(
            "gateway_upstream_response_bytes",
            "Body bytes received from upstreams, by tool",
            ["tool"],
            buckets=BYTES_BUCKETS,
            registry=r,
        )
        self.http_duration = Histogram(
            "gateway_http_request_duration_seconds",
            "HTTP API request latency by route and status class",
            ["route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "gateway_in_flight_requests", "HTTP API requests being handled", registry=r
        )
        self.open_tunnels = Gauge(
            "gateway_open_tunnels", "Forward-proxy tunnels currently open", registry=r
        )
        self.audit_write = Histogram(
            "gateway_audit_write_seconds",
            "Time to append one audit record",
            buckets=AUDIT_BUCKETS,
            registry=r,
        )
        self.audit_failures = Counter(
            "gateway_audit_write_failures", "Audit records that could not be written", registry=r
        )
        self.reloads = Counter(
            "gateway_policy_reloads",
            "Policy and client reloads by outcome",
            ["outcome"],
            registry=r,
        )
        self.draining = Gauge("gateway_draining", "1 while shutting down", registry=r)
        # Only exported with state.redis set, so a dashboard never reads "down" for "unused".
        self.redis_up = Gauge(
            "gateway_redis_up",
            "1 while the shared state (state.redis) answers",
            registry=r if shared_state else None,
        )
        self.shared_state_fallbacks = Counter(
            "gateway_shared_state_fallbacks",
            "Operations that could not use Redis, by store and what was done instead",
            ["store", "action"],
            registry=r,
        )

    # -- labels ----------------------------------------------------------------------------

    def set_clients(self, client_ids: Iterable[str]) -> None:
        """The configured client ids: the only client label values besides 'anonymous'."""
        self._clients = frozenset(client_ids)

    def client_label(self, client_id: object) -> str:
        return client_id if isinstance(client_id, str) and client_id in self._clients else ANONYMOUS

    # -- observations ----------------------------------------------------------------------

    def observe_record(self, record: Mapping[str, Any]) -> None:
        """One audit record as written: the decision, its latency and the upstream bytes."""
        try:
            self._observe_record(record)
        except Exception:  # a malformed record is the writer's business, never the request's
            log.exception("metrics: could not observe an audit record")

    def _observe_record(self, record: Mapping[str, Any]) -> None:
        event = record.get("event") or {}
        action = event.get("action")
        if action == "policy_reload":
            self.reloads.labels(_bounded(event.get("outcome"), OUTCOMES)).inc()
            return
        if action not in ACTIONS:
            return
        tool = str(action)
        policy = record.get("policy") or {}
        error = record.get("error") or {}
        decision = _bounded(policy.get("decision"), DECISIONS)
        reason = policy.get("reason") or (error.get("code") if isinstance(error, dict) else None)
        client = self.client_label((record.get("client") or {}).get("id"))
        self.decisions.labels(tool, decision, _bounded(reason, REASONS), client).inc()
        duration = event.get("duration_ms")
        if isinstance(duration, int | float) and duration >= 0:
            self.tool_duration.labels(tool).observe(duration / 1000)
        response = ((record.get("http") or {}).get("response")) or {}
        size = response.get("bytes") if isinstance(response, dict) else None
        if isinstance(size, int) and size >= 0:
            self.upstream_bytes.labels(tool).observe(size)
        if tool == "proxy_connect" and decision == "allow" and event.get("outcome") == "success":
            self.tunnels_open += 1
            self.open_tunnels.set(self.tunnels_open)
        elif tool == "tunnel_close":
            self.tunnels_open = max(0, self.tunnels_open - 1)
            self.open_tunnels.set(self.tunnels_open)

    def request_started(self) -> None:
        self.requests_in_flight += 1
        self.in_flight.set(self.requests_in_flight)

    def request_finished(self, route: str, status: int, seconds: float) -> None:
        self.requests_in_flight -= 1
        self.in_flight.set(self.requests_in_flight)
        self.http_duration.labels(route, f"{status // 100}xx").observe(seconds)

    @property
    def busy(self) -> int:
        """Requests and tunnels in flight: what a drain waits for."""
        return self.requests_in_flight + self.tunnels_open

    def set_redis_up(self, up: bool) -> None:
        self.redis_up.set(1.0 if up else 0.0)

    def fallback(self, store: str, action: str) -> None:
        self.shared_state_fallbacks.labels(store, action).inc()

    def set_search(
        self, providers: Sequence[Mapping[str, Any]], cache: Mapping[str, int] | None
    ) -> None:
        """From `HealthStore.snapshot()` and `CacheStats.to_dict()`."""
        self._search.providers = [(str(p.get("id")), str(p.get("state"))) for p in providers]
        self._search.cache = dict(cache) if cache is not None else None

    # -- scraping --------------------------------------------------------------------------

    def add_refresher(self, refresher: Refresher) -> None:
        """An async callable run before each scrape (e.g. reading shared provider health)."""
        self._refreshers.append(refresher)

    async def render(self) -> bytes:
        for refresher in self._refreshers:
            try:
                await asyncio.wait_for(refresher(), REFRESH_TIMEOUT_S)
            except Exception as exc:  # a slow or failing source leaves its last values
                log.warning("metrics refresh failed", extra={"error": type(exc).__name__})
        return generate_latest(self.registry)

    def registry_text(self) -> str:
        """The current values without the scrape-time refresh."""
        return generate_latest(self.registry).decode()


class ObservedAuditLog(AuditLog):
    """The audit log with every append timed and observed: the one place each decision
    passes. Failures are counted and re-raised unchanged (the request still fails closed)."""

    def __init__(self, path: str, *, metrics: Metrics, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.metrics = metrics

    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            written = super().append(record)
        except AuditWriteError:
            self.metrics.audit_failures.inc()
            raise
        self.metrics.audit_write.observe(time.perf_counter() - started)
        self.metrics.observe_record(written)
        return written
