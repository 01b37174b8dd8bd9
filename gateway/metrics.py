"""Prometheus metrics of one gateway process: one `CollectorRegistry`, owned by `Services`.

Every label value is bounded: tools, decisions and reasons come from fixed lists, clients from
the configuration (anything else is "anonymous"), routes from the router; never a URL or a
host. Observing never raises into a request and never decides anything.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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
_EMPTY: Mapping[str, Any] = {}


def _bounded(value: object, allowed: frozenset[str]) -> str:
    if value is None:
        return NONE
    text = str(value)
    return text if text in allowed else OTHER


class LabelledSeries(Collector):
    """A counter, or a histogram when given buckets, by label values: updated under one lock
    and turned into samples at scrape time. The audit log observes every record, and
    prometheus_client's child lookup and lock per value cost several times more; the text
    exposition is the same as its Counter's and Histogram's."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets) if buckets is not None else None
        # label values -> [count] for a counter; [per bucket..., +Inf, sum] for a histogram
        self._series: dict[tuple[str, ...], list[float]] = {}
        self._created: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        if not self.labelnames:
            self._add(())  # an unlabelled series shows from the start, as prometheus_client's
        if registry is not None:
            registry.register(self)

    def inc(self, labels: tuple[str, ...] = (), amount: float = 1.0) -> None:
        with self._lock:
            series = self._series.get(labels) or self._add(labels)
            series[0] += amount

    def observe(self, value: float, labels: tuple[str, ...] = ()) -> None:
        assert self.bounds is not None
        index = bisect.bisect_left(self.bounds, value)  # the first bucket with value <= le
        with self._lock:
            series = self._series.get(labels) or self._add(labels)
            series[index] += 1
            series[-1] += value

    def _add(self, labels: tuple[str, ...]) -> list[float]:
        size = 1 if self.bounds is None else len(self.bounds) + 2
        series = self._series[labels] = [0.0] * size
        self._created[labels] = time.time()
        return series

    def collect(self) -> Iterator[Any]:
        with self._lock:
            snapshot = [(k, list(v), self._created[k]) for k, v in self._series.items()]
        if self.bounds is None:
            counter = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for labels, series, created in snapshot:
                counter.add_metric(labels, series[0], created=created)
            yield counter
            return
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        bounds = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for labels, series, created in snapshot:
            cumulative, buckets = 0.0, []
            for bound, count in zip(bounds, series, strict=False):
                cumulative += count
                buckets.append((bound, cumulative))
            histogram.add_metric(labels, buckets, series[-1])
            named = dict(zip(self.labelnames, labels, strict=True))
            histogram.samples.append(Sample(f"{self.name}_created", named, created))
        yield histogram


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
        # With several workers: adds the other workers' series to a scrape (server/worker_metrics).
        self.merge: Callable[[bytes], bytes] | None = None
        self._search = _SearchStats()
        r.register(self._search)
        info = Gauge("gateway_info", "Version and instance", ["version", "instance"], registry=r)
        info.labels(version, instance_id).set(1)
        # Observed on every record or request: LabelledSeries, not prometheus_client's.
        self.decisions = LabelledSeries(
            "gateway_decisions",
            "Audited decisions by tool, decision, reason and client",
            ["tool", "decision", "reason", "client"],
            registry=r,
        )
        self.tool_duration = LabelledSeries(
            "gateway_tool_duration_seconds",
            "Time from a call's start to its audit record, by tool",
            ["tool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_bytes = LabelledSeries(
            "gateway_upstream_response_bytes",
            "Body bytes received from upstreams, by tool",
            ["tool"],
            buckets=BYTES_BUCKETS,
            registry=r,
        )
        self.http_duration = LabelledSeries(
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
        self.audit_write = LabelledSeries(
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
        event = record.get("event") or _EMPTY
        action = event.get("action")
        if action not in ACTIONS:
            if action == "policy_reload":
                self.reloads.labels(_bounded(event.get("outcome"), OUTCOMES)).inc()
            return
        tool = str(action)
        policy = record.get("policy") or _EMPTY
        error = record.get("error") or _EMPTY
        decision = _bounded(policy.get("decision"), DECISIONS)
        reason = policy.get("reason") or (error.get("code") if isinstance(error, dict) else None)
        client = self.client_label((record.get("client") or _EMPTY).get("id"))
        self.decisions.inc((tool, decision, _bounded(reason, REASONS), client))
        labels = (tool,)
        duration = event.get("duration_ms")
        if isinstance(duration, int | float) and duration >= 0:
            self.tool_duration.observe(duration / 1000, labels)
        http = record.get("http")
        if http:
            response = http.get("response") or _EMPTY
            size = response.get("bytes") if isinstance(response, dict) else None
            if isinstance(size, int) and size >= 0:
                self.upstream_bytes.observe(size, labels)
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
        self.http_duration.observe(seconds, (route, f"{status // 100}xx"))

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
        """What /metrics answers: this process's series, and every live worker's with workers."""
        own = await self.render_own()
        return own if self.merge is None else self.merge(own)

    async def render_own(self) -> bytes:
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
