"""The search chain: ask configured providers in order until one answers with results.

Cooling providers are skipped, failures and empty answers hand over to the next provider, a
retryable failure is retried (`retries` times, default once) after the provider's backoff,
and the whole search fits in a deadline. Every warning reads "<id>: [class] message" with API
keys scrubbed. Domain filters are applied again to what comes back. The answer is
canonicalised, deduplicated (near-duplicates merged, see dedupe.py), re-ranked by the domain
weights when there are any, and cached. `search_many` searches several phrasings of one
question in parallel under one deadline and fuses them (fusion.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.search.cache import SearchCache, search_cache_key
from gateway.search.canonical import SearchResult, canonical_url, dedup, result_id
from gateway.search.dedupe import merge_near_duplicates
from gateway.search.failures import ErrorClass, ProviderError, scrub_secrets
from gateway.search.fusion import DomainWeights, fuse
from gateway.search.health import HealthState, HealthStore, iso_time
from gateway.search.providers.adapter import ProviderAdapter, ProviderSettings
from gateway.search.query import (
    Freshness,
    RawResult,
    SearchQuery,
    YearRewrite,
    host_within,
    rewrite_chinese_year,
)
from gateway.search.transport import ProviderTransport, ProviderTransportError

log = logging.getLogger("gateway.search")

_RETRYABLE = {ErrorClass.TIMEOUT, ErrorClass.NETWORK, ErrorClass.SERVER_ERROR}
# Slack on top of the timeout handed to the transport, in case one does not honour it.
_TRANSPORT_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class ConfiguredProvider:
    id: str
    adapter: ProviderAdapter
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    allow_private: bool = False
    secret_id: str | None = field(default=None, repr=False)  # a key pair's id (tencent_wsa)
    secret_id_env: str | None = None
    model: str | None = None  # model-native providers
    retries: int = 1  # of a timeout, network or server error, or a short rate limit
    backoff: float | None = None  # seconds before a retry; None = the engine's RetryPolicy

    @property
    def kind(self) -> str:
        return self.adapter.kind

    @property
    def key_missing(self) -> bool:
        if self.secret_id_env is not None and not self.secret_id:
            return True
        return self.adapter.needs_key and not self.api_key

    @property
    def missing_key_names(self) -> tuple[str, ...]:
        """The environment variables that should hold this provider's missing secrets."""
        names = []
        if self.secret_id_env is not None and not self.secret_id:
            names.append(self.secret_id_env)
        if self.adapter.needs_key and not self.api_key and self.api_key_env:
            names.append(self.api_key_env)
        return tuple(names)

    def settings(self, now: float) -> ProviderSettings:
        return ProviderSettings(
            base_url=self.base_url,
            api_key=self.api_key,
            secret_id=self.secret_id,
            model=self.model or self.adapter.default_model,
            now=now,
        )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: before retry n (from 0) the wait is drawn
    uniformly from [0, min(cap, backoff * 2**n)] (AWS's "full jitter"), so retries of many
    searches spread out instead of arriving together."""

    backoff: float = 0.25  # the base, in seconds (a provider's backoff_ms replaces it)
    cap: float = 2.0  # no wait is longer than this
    max_retry_after: float = 2.0  # a rate limit is retried only when it asks for at most this
    # Draws from [0, 1): injectable, so tests are deterministic and never really wait.
    jitter: Callable[[], float] = random.random

    def wait(self, base: float, attempt: int) -> float:
        return self.jitter() * min(self.cap, base * 2 ** min(attempt, 16))


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    query: str  # as the caller wrote it
    sent_query: str  # what the answering provider was asked (after any year rewrite)
    provider: str | None  # None only when no provider answered with results or emptiness
    providers_tried: tuple[str, ...]
    warnings: tuple[str, ...]
    results: tuple[SearchResult, ...]
    deduped: int
    filtered_domains: int
    freshness_applied: bool
    cached: bool
    query_rewritten: bool
    query_year: int | None
    freshness_auto_inferred: bool
    answer: str | None = None  # the provider's own answer (model prose, an answer box)
    queries: tuple[str, ...] = ()  # every phrasing of a fused search; empty for one query
    time_range_applied: tuple[str, str] | None = None  # the dates the provider filtered by
    total: int | None = None  # the provider's estimate of how many results exist
    provider_switched: bool = False  # a later provider of the chain answered

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "sent_query": self.sent_query,
            "provider": self.provider,
            "providers_tried": list(self.providers_tried),
            "warnings": list(self.warnings),
            "results": [r.to_dict() for r in self.results],
            "deduped": self.deduped,
            "filtered_domains": self.filtered_domains,
            "freshness_applied": self.freshness_applied,
            "cached": self.cached,
            "query_rewritten": self.query_rewritten,
            "query_year": self.query_year,
            "freshness_auto_inferred": self.freshness_auto_inferred,
            "answer": self.answer,
            "queries": list(self.queries),
            "time_range_applied": list(self.time_range_applied)
            if self.time_range_applied
            else None,
            "total": self.total,
            "provider_switched": self.provider_switched,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchOutcome:
        """The inverse of `to_dict`, for caches that store JSON."""
        return cls(
            query=data["query"],
            sent_query=data["sent_query"],
            provider=data["provider"],
            providers_tried=tuple(data["providers_tried"]),
            warnings=tuple(data["warnings"]),
            results=tuple(SearchResult.from_dict(r) for r in data["results"]),
            deduped=data["deduped"],
            filtered_domains=data["filtered_domains"],
            freshness_applied=data["freshness_applied"],
            cached=data["cached"],
            query_rewritten=data["query_rewritten"],
            query_year=data["query_year"],
            freshness_auto_inferred=data["freshness_auto_inferred"],
            answer=data.get("answer"),
            queries=tuple(data.get("queries", ())),
            time_range_applied=_window(data.get("time_range_applied")),
            total=data.get("total"),
            provider_switched=bool(data.get("provider_switched", False)),
        )


@dataclass(slots=True)
class _Answer:
    provider: str
    sent: SearchQuery
    results: list[SearchResult]
    deduped: int
    filtered: int
    freshness_applied: bool
    answer: str | None = None
    total: int | None = None
    window: tuple[str, str] | None = None


class SearchEngine:
    def __init__(
        self,
        providers: Sequence[ConfiguredProvider],
        transport: ProviderTransport,
        *,
        health: HealthStore,
        cache: SearchCache[SearchOutcome] | None = None,
        timeout: float = 10.0,
        deadline: float = 20.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        weights: DomainWeights | None = None,
        region_providers: Mapping[str, Sequence[str]] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not providers:
            raise ValueError("at least one search provider is needed")
        ids = [p.id for p in providers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"search provider ids must be unique: {ids}")
        self._providers = {p.id: p for p in providers}
        self._order = tuple(ids)
        self._transport = transport
        self._health = health
        self._cache = cache
        self._timeout = timeout
        self._deadline = deadline
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._weights = weights or DomainWeights()
        # The effective search settings /v1/status shows (never a key).
        self._settings = dict(settings or {})
        # Country -> the providers asked first for it; ids not in this chain (a keyed
        # provider whose key is not set, left out of the automatic chain) are passed over.
        self._region_first = {
            country: tuple(pid for pid in ids if pid in self._providers)
            for country, ids in (region_providers or {}).items()
        }
        self._secrets = tuple(
            secret for p in providers for secret in (p.api_key, p.secret_id) if secret
        )

    @property
    def provider_ids(self) -> tuple[str, ...]:
        return self._order

    def chain_for(self, query: SearchQuery) -> tuple[str, ...]:
        """The providers in the order this query asks them: its region's first
        (`search.region_providers`), then the rest of the chain."""
        first = self._region_first.get(query.country or "", ())
        return tuple(dict.fromkeys((*first, *self._order))) if first else self._order

    async def search(self, query: SearchQuery, *, provider_id: str | None = None) -> SearchOutcome:
        if provider_id is not None and provider_id not in self._providers:
            raise InvalidRequestError(
                f"provider: unknown provider {provider_id[:64]!r}; "
                f"configured: {', '.join(self._order)}"
            )
        chain = (provider_id,) if provider_id is not None else self.chain_for(query)
        key = search_cache_key(query, chain, pinned=provider_id is not None)
        if self._cache is not None:
            hit = await self._cache.get(key)
            if hit is not None:
                return replace(hit, cached=True)

        rewrite = rewrite_chinese_year(query)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline
        tried: list[str] = []
        warnings: list[str] = []
        answer: _Answer | None = None
        empty: _Answer | None = None
        for pid in chain:
            provider = self._providers[pid]
            skip = await self._skip_reason(provider, deadline - loop.time())
            if skip is not None:
                self._warn(warnings, pid, skip)
                continue
            sent = query_for(provider.adapter, query, rewrite)
            tried.append(pid)
            try:
                raw, said, total = await self._ask(provider, sent, deadline)
            except ProviderError as error:
                if error.error_class is not ErrorClass.BUDGET_EXHAUSTED:
                    await self._health.record_failure(pid, error.error_class, error.retry_after)
                self._warn(warnings, pid, error)
                continue
            await self._health.record_success(pid)
            candidate = self._finish(pid, provider.adapter, sent, raw, said, total)
            if candidate.results:
                answer = candidate
                break
            empty = empty or candidate
            detail = (
                f"{candidate.filtered} outside the domain filters" if candidate.filtered else ""
            )
            self._warn(warnings, pid, ProviderError(ErrorClass.NO_RESULTS, _no_results(detail)))

        chosen = answer or empty
        if chosen is None:
            raise UpstreamError("every search provider failed: " + "; ".join(warnings))
        rewritten = chosen.sent is rewrite.query and rewrite.query_rewritten
        outcome = SearchOutcome(
            query=query.query,
            sent_query=chosen.sent.query,
            provider=chosen.provider,
            providers_tried=tuple(tried),
            warnings=tuple(warnings),
            results=tuple(chosen.results),
            deduped=chosen.deduped,
            filtered_domains=chosen.filtered,
            freshness_applied=chosen.freshness_applied,
            cached=False,
            query_rewritten=rewritten,
            query_year=rewrite.query_year,
            freshness_auto_inferred=rewritten and rewrite.freshness_auto_inferred,
            answer=chosen.answer,
            time_range_applied=chosen.window,
            total=chosen.total,
            provider_switched=chosen.provider != chain[0],
        )
        if self._cache is not None and answer is not None:
            await self._cache.put(key, outcome)
        return outcome

    async def search_many(
        self, queries: Sequence[SearchQuery], *, provider_id: str | None = None
    ) -> SearchOutcome:
        """Several phrasings of one question, each through the chain (and the cache), all at
        once within one deadline, fused by reciprocal rank. One phrasing is `search`.

        `deduped` counts every entry folded into another: within a phrasing's answer and
        the same page found by several phrasings. Fails only when every phrasing failed.
        """
        if len(queries) == 1:
            return await self.search(queries[0], provider_id=provider_id)
        outcomes = await asyncio.gather(
            *(self.search(q, provider_id=provider_id) for q in queries), return_exceptions=True
        )
        answered: list[SearchOutcome] = []
        warnings: list[str] = []
        for query, outcome in zip(queries, outcomes, strict=True):
            if isinstance(outcome, UpstreamError):
                warnings.append(self._scrub(f"{query.query[:80]!r}: {outcome.message}"))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                answered.append(outcome)
        if not answered:
            raise UpstreamError("every search provider failed, for every phrasing: "
                                + " | ".join(warnings))  # fmt: skip
        fused, folded = fuse([o.results for o in answered], self._weights)
        fused, merged = merge_near_duplicates(fused)
        first = answered[0]
        limit = max(q.max_results for q in queries)
        tried = dict.fromkeys(pid for o in outcomes if isinstance(o, SearchOutcome)
                              for pid in o.providers_tried)  # fmt: skip
        lines = dict.fromkeys([*(w for o in answered for w in o.warnings), *warnings])
        providing = next((o for o in answered if o.results), first)
        return replace(
            first,
            provider=providing.provider,
            providers_tried=tuple(tried),
            warnings=tuple(lines),
            results=tuple(fused[:limit]),
            deduped=sum(o.deduped for o in answered) + folded + merged,
            filtered_domains=sum(o.filtered_domains for o in answered),
            freshness_applied=all(o.freshness_applied for o in answered if o.provider),
            cached=all(o.cached for o in answered),
            answer=next((o.answer for o in answered if o.answer), None),
            queries=tuple(q.query for q in queries),
            time_range_applied=providing.time_range_applied,
            total=providing.total,
            provider_switched=any(o.provider_switched for o in answered),
        )

    def missing_keys(self) -> dict[str, tuple[str, ...]]:
        """Provider id -> the environment variables its missing secrets should be in."""
        return {
            p.id: p.missing_key_names or ("?",) for p in self._providers.values() if p.key_missing
        }

    async def status(self) -> dict[str, Any]:
        """Providers with their health (for /v1/status), and cache statistics."""
        health = await self._health.snapshot(self._order)
        missing = self.missing_keys()
        providers = []
        for entry in health:
            provider = self._providers[entry["id"]]
            item = {
                **entry,
                "kind": provider.kind,
                "host": _host_of(provider.base_url),
                "retries": provider.retries,
                "backoff_ms": round(
                    (provider.backoff if provider.backoff is not None else self._retry.backoff)
                    * 1000
                ),
            }
            if provider.model or provider.adapter.default_model:
                item["model"] = provider.model or provider.adapter.default_model
            if provider.id in missing:
                item["key_missing"] = list(missing[provider.id])
            providers.append(item)
        cache = (await self._cache.stats()).to_dict() if self._cache is not None else None
        config = {
            "chain": self._settings.get("chain", "configured"),
            "timeout": self._timeout,
            "deadline": self._deadline,
            "cache_ttl": self._settings.get("cache_ttl", 0.0),
            "weights": dict(self._settings.get("weights") or {}),
            "region_providers": {c: list(ids) for c, ids in self._region_first.items()},
            "prefer": self._settings.get("prefer"),
        }
        return {"providers": providers, "cache": cache, "config": config}

    async def _skip_reason(
        self, provider: ConfiguredProvider, remaining: float
    ) -> ProviderError | None:
        if provider.key_missing:
            names = provider.missing_key_names
            where = f" (set {', '.join(names)})" if names else ""
            return ProviderError(ErrorClass.HTTP_4XX, f"no API key configured{where}; not asked")
        health = await self._health.get(provider.id)
        now = self._clock()
        if health.state_at(now) is HealthState.COOLING and health.cooling_until is not None:
            return ProviderError(
                health.last_error or ErrorClass.SERVER_ERROR,
                f"cooling down until {iso_time(health.cooling_until)} after repeated failures "
                "or a rate limit; not asked",
            )
        if remaining <= 0:
            return ProviderError(
                ErrorClass.BUDGET_EXHAUSTED,
                f"the search deadline of {self._deadline:g} s was spent; not asked",
            )
        return None

    async def _ask(
        self, provider: ConfiguredProvider, query: SearchQuery, deadline: float
    ) -> tuple[list[RawResult], str | None, int | None]:
        """One request, and up to `retries` more when the failure is worth it and time
        allows; the results, the provider's own answer and its estimated total, if it
        gives them."""
        loop = asyncio.get_running_loop()
        retried = 0
        bare_429_retried = False
        while True:
            # Built for each attempt: a signed request carries the time it was signed.
            request = provider.adapter.request(query, provider.settings(self._clock()))
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ProviderError(
                    ErrorClass.BUDGET_EXHAUSTED,
                    f"the search deadline of {self._deadline:g} s ran out",
                )
            per_request = min(self._timeout, remaining)
            try:
                response = await asyncio.wait_for(
                    self._transport.send(
                        request, timeout=per_request, allow_private=provider.allow_private
                    ),
                    per_request + _TRANSPORT_GRACE,
                )
                return _parse(provider, response)
            except (ProviderTransportError, GatewayError, TimeoutError) as exc:
                error = _transport_failure(exc, per_request)
                if error.error_class is ErrorClass.TIMEOUT and per_request < self._timeout:
                    error = ProviderError(
                        ErrorClass.BUDGET_EXHAUSTED,
                        f"the search deadline of {self._deadline:g} s ran out while waiting",
                    )
            except ProviderError as exc:
                error = exc
            bare_429 = (
                error.error_class is ErrorClass.RATE_LIMITED
                and error.retry_after is None
                and error.status == 429
            )
            wait = self._retry_wait(error, provider, retried)
            if bare_429 and not bare_429_retried:
                # A 429 that names no wait: one more try after the backoff, then it cools.
                wait = self._retry.wait(self._base(provider), retried)
                bare_429_retried = True
            if retried >= provider.retries or wait is None or wait >= deadline - loop.time():
                raise error
            retried += 1
            log.info(
                "search provider %s: %s; retrying in %.2f s",
                provider.id,
                self._scrub(str(error)),
                wait,
            )
            await self._sleep(wait)

    def _base(self, provider: ConfiguredProvider) -> float:
        return self._retry.backoff if provider.backoff is None else provider.backoff

    def _retry_wait(
        self, error: ProviderError, provider: ConfiguredProvider, attempt: int
    ) -> float | None:
        """The wait before retrying `error` (None: not worth a retry)."""
        backoff = self._retry.wait(self._base(provider), attempt)
        if error.error_class in _RETRYABLE:
            return backoff
        if (
            error.error_class is ErrorClass.RATE_LIMITED
            and error.retry_after is not None
            and 0 <= error.retry_after <= self._retry.max_retry_after
        ):
            return max(error.retry_after, backoff)
        return None

    def _finish(
        self,
        pid: str,
        adapter: ProviderAdapter,
        sent: SearchQuery,
        raw: list[RawResult],
        said: str | None = None,
        total: int | None = None,
    ) -> _Answer:
        results: list[SearchResult] = []
        filtered = 0
        for item in raw:
            url = canonical_url(item.url)
            if url is None:
                continue
            host = (urlsplit(url).hostname or "").lower()
            if not _domain_allowed(host, sent):
                filtered += 1
                continue
            results.append(
                SearchResult(
                    id=result_id(url),
                    title=item.title,
                    url=url,
                    snippet=item.snippet,
                    domain=host,
                    published_at=item.published_at,
                    score=item.score,
                )
            )
        kept, deduped = dedup(results)
        kept, merged = merge_near_duplicates(kept)
        if self._weights:
            kept, _ = fuse([kept], self._weights)
        applied = sent.has_time_filter and adapter.applies_time_filter(sent)
        return _Answer(
            provider=pid,
            sent=sent,
            results=kept[: sent.max_results],
            deduped=deduped + merged,
            filtered=filtered,
            freshness_applied=applied,
            answer=said,
            total=total,
            window=applied_window(sent, self._clock()) if applied else None,
        )

    def _warn(self, warnings: list[str], pid: str, error: ProviderError) -> None:
        line = self._scrub(f"{pid}: [{error.error_class}] {error.message}")
        warnings.append(line)
        log.warning("search provider %s", line)

    def _scrub(self, text: str) -> str:
        return scrub_secrets(text, self._secrets)


def query_for(adapter: ProviderAdapter, query: SearchQuery, rewrite: YearRewrite) -> SearchQuery:
    """What one provider is asked for a query whose Chinese year may have been rewritten:
    the year as its date range where the provider applies one (the year out of the text);
    elsewhere the year stays in the text, and the window goes along for a provider that
    sends it without being known to honour it (Bing's page, a model's prompt)."""
    if not rewrite.query_rewritten:
        return query
    if adapter.applies_time_filter(rewrite.query):
        return rewrite.query
    return replace(query, time_range=rewrite.query.time_range)


def _parse(
    provider: ConfiguredProvider, response: Any
) -> tuple[list[RawResult], str | None, int | None]:
    try:
        adapter = provider.adapter
        results = adapter.parse(response)
        answer = adapter.parse_answer(response) if adapter.parse_answer is not None else None
        total = adapter.parse_total(response) if adapter.parse_total is not None else None
        return results, answer, total
    except ProviderError as error:
        error.status = getattr(response, "status", None)
        raise
    except Exception as exc:  # a parser bug must cost one provider, not the search
        log.exception("search provider %s: parser failed", provider.id)
        raise ProviderError(
            ErrorClass.INVALID_RESPONSE, f"response could not be read ({type(exc).__name__})"
        ) from None


def _transport_failure(exc: Exception, timeout: float) -> ProviderError:
    if isinstance(exc, ProviderTransportError):
        cls = ErrorClass.TIMEOUT if exc.error_class == "timeout" else ErrorClass.NETWORK
        return ProviderError(cls, exc.message)
    if isinstance(exc, TimeoutError | UpstreamTimeoutError):
        return ProviderError(ErrorClass.TIMEOUT, f"no answer within {timeout:g} s")
    if isinstance(exc, ResponseTooLargeError):
        return ProviderError(ErrorClass.INVALID_RESPONSE, exc.message)
    assert isinstance(exc, GatewayError)
    return ProviderError(ErrorClass.NETWORK, f"{exc.code}: {exc.message}")


def _host_of(base_url: str) -> str:
    """host[:port] of a base URL: where a provider is reached, never its path or query (a
    mirror's URL could carry a token there)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def _domain_allowed(host: str, query: SearchQuery) -> bool:
    if query.site and not host_within(host, query.site):
        return False
    if query.include_domains and not any(host_within(host, d) for d in query.include_domains):
        return False
    return not any(host_within(host, d) for d in query.exclude_domains)


# The window a freshness bucket stands for, counted back from today (UTC).
_FRESHNESS_DAYS = {Freshness.DAY: 1, Freshness.WEEK: 7, Freshness.MONTH: 31, Freshness.YEAR: 365}


def applied_window(query: SearchQuery, now: float) -> tuple[str, str] | None:
    """The dates a time filter covers: the range asked for, or the freshness bucket's days
    back from today (UTC, from the engine's clock)."""
    if query.time_range is not None:
        start, end = query.time_range
        return start.isoformat(), end.isoformat()
    if query.freshness is None:
        return None
    today = datetime.fromtimestamp(now, UTC).date()
    start = today - timedelta(days=_FRESHNESS_DAYS[query.freshness])
    return start.isoformat(), today.isoformat()


def _window(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        return str(value[0]), str(value[1])
    return None


def _no_results(detail: str) -> str:
    return "answered with no results" + (f" ({detail})" if detail else "")
