"""The Fetcher: WebFetch's, Research's and the providers' way out, over the one upstream client.

Requests go through the upstream client of `fetch.upstream`, one pool per policy (so DNS
answers and pooled connections never cross policies): names are resolved and every address
checked (`fetch.tunnel`), sockets come from the policy's `SocketGuard` (`fetch.dial`), which
classifies the exact address dialled, and HTTPS is verified against the name asked for while
the checked address is dialled. Each response is read once, by the strict reader of
`wire.http1`. Redirects are followed here, by hand: each hop is planned by the policy's
redirect rules and decided from step 1. Bodies are streamed through a decoder that stops at
`max_response_bytes` after decompression. Timeouts: connect (DNS, TCP and TLS together), read
(between two reads, from the request sent), and one total deadline over every hop and the body.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import ssl
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import yarl
from multidict import CIMultiDict, CIMultiDictProxy

from gateway import __version__
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    PolicyDeniedError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.fetch.decode import ACCEPT_ENCODING, BoundedDecoder, parse_content_encoding
from gateway.fetch.resolver import StaticHosts
from gateway.fetch.tunnel import AddressCheckFailed
from gateway.fetch.upstream import UpstreamConnection, UpstreamPool
from gateway.policy.engine import Decision, decide_answer, decide_content_type
from gateway.policy.hints import refusal_text
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.redirects import AmbiguousRedirectError, plan_redirect
from gateway.policy.urls import Target
from gateway.wire.http1 import LENGTH, ResponseHead

DEFAULT_USER_AGENT = f"agent-egress-gateway/{__version__} (+policy-enforcing fetcher)"
ACCEPT = "text/html,application/xhtml+xml,application/json;q=0.9,text/*;q=0.8,*/*;q=0.1"
REDIRECT_BODY_DRAIN = 64 * 1024
# What a request field may hold: a token name, a value without CR, LF or NUL.
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VALUE = re.compile(r"[^\x00\r\n]*\Z")
@dataclass(slots=True)
class RedirectHop:
    url: str  # where the hop pointed (absolute, normalised when it parsed)
    status: int
    decision: Decision

    def to_record(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": self.status,
            "decision": self.decision.verdict,
            "rule": self.decision.rule,
            "reason": str(self.decision.reason) if self.decision.reason else None,
        }


@dataclass(slots=True)
class FetchTrace:
    """What happened so far; the caller reads it for the audit record on every outcome."""

    requested: Target
    current: Target
    decision: Decision | None = None  # the last deciding decision (hop, address or type)
    redirects: list[RedirectHop] = field(default_factory=list)
    ip: str | None = None
    status: int | None = None
    body_bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


@dataclass(frozen=True, slots=True)
class FetchResult:
    target: Target  # the final URL
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes  # after content decoding
    body_sha256: str
    ip: str | None
    trace: FetchTrace

    @property
    def content_type(self) -> str | None:
        return self.headers.get("Content-Type")


@dataclass(frozen=True, slots=True)
class FetchOptions:
    method: str = "GET"
    tool: str | None = "WebFetch"
    headers: Mapping[str, str] | None = None  # operator-set headers only (provider keys)
    body: bytes | None = None
    max_bytes: int | None = None  # default: the policy's max_response_bytes
    follow_redirects: bool = True
    check_content_type: bool = True
    total_timeout: float | None = None  # default: the policy's timeouts.total
    read_timeout: float | None = None  # math.inf: none per read (the caller watches for stalls)
    connect_timeout: float | None = None


def pool_key(policy: Policy) -> tuple[str, str, str]:
    """What names a policy's connection pool: one per policy file and content."""
    return (policy.name, policy.sha256, policy.source)


class Fetcher:
    def __init__(
        self,
        *,
        static_hosts: StaticHosts | None = None,
        own_addresses: Collection[tuple[IPNetwork, int]] = (),
        ca_file: str | None = None,
        user_agent: str | None = None,
        pool_limit: int = 256,
    ) -> None:
        self._static_hosts = static_hosts or {}
        self._own = tuple(own_addresses)
        self._ssl = ssl.create_default_context()
        if ca_file:
            self._ssl.load_verify_locations(cafile=ca_file)
        self.user_agent = user_agent or DEFAULT_USER_AGENT
        self._pool_limit = pool_limit
        self._pools: dict[tuple[str, str, str], _PolicyPool] = {}
        self._base_fields = (
            ("User-Agent", self.user_agent),
            ("Accept", ACCEPT),
            ("Accept-Encoding", ACCEPT_ENCODING),
        )
        # Built once: a request without operator headers pays no formatting for them.
        self._base_head = "".join(f"{name}: {value}\r\n" for name, value in self._base_fields)

    async def set_own_addresses(self, own: Collection[tuple[IPNetwork, int]]) -> None:
        """Called once the server has bound its ports; new pools apply the new set."""
        self._own = tuple(own)
        await self.close()

    @property
    def static_hosts(self) -> StaticHosts:
        return self._static_hosts

    @property
    def own_addresses(self) -> tuple[tuple[IPNetwork, int], ...]:
        return self._own

    def pool(self, policy: Policy) -> UpstreamPool | None:
        """The connection pool of `policy`, if one is open (one per policy file and content)."""
        held = self._pools.get(pool_key(policy))
        return None if held is None else held.connections

    def pool_count(self) -> int:
        return len(self._pools)

    def _pool(self, policy: Policy) -> _PolicyPool:
        key = pool_key(policy)
        held = self._pools.get(key)
        if held is None:
            own = self._own
            connections = UpstreamPool(
                static_hosts=lambda: self._static_hosts,
                own_addresses=lambda: own,
                max_idle_per_key=self._pool_limit,
                tls=self._ssl,
                lookup_apart=True,  # a silent name server: the name did not resolve
            )
            held = self._pools[key] = _PolicyPool(connections, asyncio.Semaphore(self._pool_limit))
        return held

    def retire(self, policy: Policy) -> None:
        """Close a policy's pool (a reload dropped the policy; the caller waited for requests
        in flight): its idle connections now, any still busy when they finish. A later
        request under the same policy opens a new pool."""
        held = self._pools.pop(pool_key(policy), None)
        if held is not None:
            held.connections.close()

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for held in pools:
            held.connections.close()

    async def fetch(
        self, policy: Policy, target: Target, options: FetchOptions | None = None
    ) -> FetchResult:
        """GET (or options.method) a decided target, following redirects by the policy."""
        options = options or FetchOptions()
        trace = FetchTrace(requested=target, current=target)
        return await self.fetch_traced(policy, trace, options)

    async def fetch_traced(
        self, policy: Policy, trace: FetchTrace, options: FetchOptions
    ) -> FetchResult:
        total = options.total_timeout or policy.timeouts.total
        try:
            async with asyncio.timeout(total):
                return await self._fetch(policy, trace, options)
        except TimeoutError:
            error: GatewayError = UpstreamTimeoutError(
                f"the fetch did not finish within {total:g} s (timeouts.total)"
            )
            raise name_the_hop(error, trace) from None
        except GatewayError as exc:
            raise name_the_hop(exc, trace) from None

    async def _fetch(self, policy: Policy, trace: FetchTrace, options: FetchOptions) -> FetchResult:
        method = options.method
        max_bytes = (
            options.max_bytes
            if options.max_bytes is not None
            else (policy.limits.max_response_bytes)
        )
        held = self._pool(policy)
        hops = 0
        while True:
            async with held.slots:
                deadline = _ReadDeadline(options.read_timeout or policy.timeouts.read)
                try:
                    async with asyncio.timeout(None) as timer:
                        deadline.timer = timer
                        conn = await self._send(
                            held.connections, policy, trace, options, method, deadline
                        )
                        try:
                            result = await self._answer(
                                conn, policy, trace, options, method, max_bytes, hops, deadline
                            )
                        finally:
                            conn.release()
                except TimeoutError:
                    if not deadline.expired:
                        raise
                    raise UpstreamTimeoutError(
                        "the upstream stopped sending (timeouts.read)"
                    ) from None
                finally:
                    deadline.cancel()
            if isinstance(result, FetchResult):
                return result
            trace.current, method = result
            hops += 1

    async def _send(
        self,
        connections: UpstreamPool,
        policy: Policy,
        trace: FetchTrace,
        options: FetchOptions,
        method: str,
        deadline: _ReadDeadline,
    ) -> UpstreamConnection:
        """One request to `trace.current` (no redirects), until its response head is read.
        An IP literal is checked here, a name's addresses when they are looked up."""
        target = trace.current
        if target.ip is not None:
            decision = decide_answer(policy, target.port, [target.ip], own_addresses=self._own)
            if not decision.allowed:
                trace.decision = decision
                raise PolicyDeniedError(decision, refusal_text(decision))
        data = self._request(method, target, options)
        try:
            conn = await connections.exchange(
                policy,
                target,
                method,
                data,
                connect_timeout=options.connect_timeout,
                touch=deadline.touch,
            )
        except AddressCheckFailed as exc:
            trace.decision = exc.decision
            raise
        trace.status = conn.head.status if conn.head is not None else None
        trace.ip = conn.ip  # the address dialled, for names and literals alike
        return conn

    def _request(self, method: str, target: Target, options: FetchOptions) -> bytes:
        """The request's bytes: origin-form target, Host, the gateway's fields, the
        operator's (provider keys; they may replace ours), Content-Length with a body."""
        host = f"[{target.host}]" if ":" in target.host else target.host
        if target.port != (443 if target.scheme == "https" else 80):
            host = f"{host}:{target.port}"
        path = target.url.raw_path_qs or "/"
        fields = self._base_head
        if options.headers:
            given: dict[str, tuple[str, str]] = {}
            for name, value in options.headers.items():
                if not _NAME.match(name) or not _VALUE.match(value):
                    raise InvalidRequestError("a request header name or value is malformed")
                given[name.lower()] = (name, value)
            named = given.pop("host", None)
            host = host if named is None else named[1]
            ours = [(name, value) for name, value in self._base_fields if name.lower() not in given]
            fields = "".join(f"{name}: {value}\r\n" for name, value in (*ours, *given.values()))
        body = options.body
        length = "" if body is None else f"Content-Length: {len(body)}\r\n"
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{fields}{length}\r\n"
        data = head.encode("utf-8")
        return data + body if body else data

    async def _answer(
        self,
        conn: UpstreamConnection,
        policy: Policy,
        trace: FetchTrace,
        options: FetchOptions,
        method: str,
        max_bytes: int,
        hops: int,
        deadline: _ReadDeadline,
    ) -> FetchResult | tuple[Target, str]:
        """The response on `conn`: the result, or where a redirect goes next."""
        head = conn.head
        assert head is not None
        headers = response_headers(head)
        status = head.status
        if options.follow_redirects:
            try:
                plan = plan_redirect(
                    policy,
                    trace.current,
                    status,
                    headers.getall("Location", []),
                    hops_done=hops,
                    method=method,
                    tool=options.tool,
                )
            except AmbiguousRedirectError as exc:
                raise UpstreamError(str(exc)) from None
            if plan is not None:
                trace.redirects.append(RedirectHop(plan.location, status, plan.decision))
                trace.decision = plan.decision
                if not plan.decision.allowed or plan.target is None:
                    raise PolicyDeniedError(plan.decision, refusal_text(plan.decision))
                await _drain(conn, deadline)
                return plan.target, plan.method
        if options.check_content_type:
            type_decision = decide_content_type(policy, headers.get("Content-Type"))
            if type_decision.reason is not None:
                # A refusal, or one report mode let through: either way the record names
                # the reason and rule (enforced: false for the second).
                trace.decision = type_decision
            if not type_decision.allowed:
                raise PolicyDeniedError(type_decision, refusal_text(type_decision))
        body = await _read_body(conn, headers, max_bytes, trace, deadline)
        return FetchResult(
            target=trace.current,
            status=status,
            headers=headers,
            body=body,
            body_sha256=hashlib.sha256(body).hexdigest(),
            ip=trace.ip,
            trace=trace,
        )


@dataclass(slots=True)
class _PolicyPool:
    connections: UpstreamPool
    slots: asyncio.Semaphore  # connections in use at once under this policy


class _ReadDeadline:
    """`timeouts.read` between two reads of one exchange, from the request sent: every read
    moves it on (a timestamp, not a new timer); the one timer looks again when it fires."""

    __slots__ = ("read", "last", "handle", "timer", "expired", "loop")

    def __init__(self, read: float) -> None:
        self.read = read
        self.loop = asyncio.get_running_loop()
        self.last = 0.0
        self.handle: asyncio.TimerHandle | None = None
        self.timer: asyncio.Timeout | None = None
        self.expired = False

    def touch(self) -> None:
        self.last = self.loop.time()
        if self.handle is None and self.read != float("inf"):
            self.handle = self.loop.call_at(self.last + self.read, self._check)

    def _check(self) -> None:
        due = self.last + self.read
        if self.loop.time() < due:
            self.handle = self.loop.call_at(due, self._check)
            return
        self.handle = None
        self.expired = True
        if self.timer is not None:
            self.timer.reschedule(self.loop.time())  # the exchange's block ends in TimeoutError

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _Collected:
    """A body pipe's sink: raw bytes counted against the raw cap, decoded under the cap."""

    __slots__ = ("decoder", "parts", "raw", "raw_limit", "max_bytes", "trace")

    write_paused = False

    def __init__(self, decoder: BoundedDecoder, max_bytes: int, trace: FetchTrace) -> None:
        self.decoder = decoder
        self.parts: list[bytes] = []
        self.raw = 0
        self.max_bytes = max_bytes
        self.raw_limit = max_bytes + 1024 * 1024  # compressed input is normally far smaller
        self.trace = trace

    def write(self, data: bytes) -> None:
        self.raw += len(data)
        if self.raw > self.raw_limit:
            raise ResponseTooLargeError(
                f"the response body exceeded max_response_bytes ({self.max_bytes} bytes)"
            )
        self.parts.extend(self.decoder.feed(data))
        self.trace.body_bytes = self.decoder.decoded

    async def drain(self) -> None:
        return None


class _Discarded:
    """A small redirect body, read so that its connection can be used again."""

    write_paused = False

    def write(self, data: bytes) -> None:
        return None

    async def drain(self) -> None:
        return None


def response_headers(head: ResponseHead) -> CIMultiDictProxy[str]:
    """The head's fields as text: names as ASCII, values as UTF-8 (undecodable bytes kept
    as surrogate escapes), the way aiohttp's client gave them."""
    return CIMultiDictProxy(
        CIMultiDict(
            (name.decode("latin-1"), value.decode("utf-8", "surrogateescape"))
            for name, value in head.headers
        )
    )


async def _read_body(
    conn: UpstreamConnection,
    headers: CIMultiDictProxy[str],
    max_bytes: int,
    trace: FetchTrace,
    deadline: _ReadDeadline,
) -> bytes:
    head = conn.head
    assert head is not None
    coding = parse_content_encoding(headers.getall("Content-Encoding", []))
    declared = head.content_length if head.framing == LENGTH else None
    if coding is None and declared is not None and declared > max_bytes:
        raise ResponseTooLargeError(
            f"the response declares {declared} bytes, over max_response_bytes ({max_bytes})"
        )
    sink = _Collected(BoundedDecoder(coding, max_bytes), max_bytes, trace)
    await conn.pipe(sink, b"", deadline.touch, rechunk=False)
    sink.parts.extend(sink.decoder.finish())
    trace.body_bytes = sink.decoder.decoded
    return b"".join(sink.parts)


async def _drain(conn: UpstreamConnection, deadline: _ReadDeadline) -> None:
    """Read a small redirect body so the connection can be reused; a large one, or one
    that fails, closes it (the connection's release does)."""
    head = conn.head
    small = head is not None and (head.content_length or 0) <= REDIRECT_BODY_DRAIN
    if head is not None and head.framing == LENGTH and small:
        try:
            await conn.pipe(_Discarded(), b"", deadline.touch, rechunk=False)
        except GatewayError:
            return


def name_the_hop(error: GatewayError, trace: FetchTrace) -> GatewayError:
    """An error after a redirect says at which hop, and to which host, it happened (the host
    only: a hop's query may carry a secret, and error messages reach the audit log)."""
    if not trace.redirects:
        return error
    hop = trace.redirects[-1]
    try:
        host = yarl.URL(hop.url).host
    except (ValueError, TypeError):
        host = None
    where = f"redirect hop {len(trace.redirects)}" + (f" (to {host})" if host else "")
    error.message = f"{where}: {error.message}"
    error.args = (error.message,)
    return error


