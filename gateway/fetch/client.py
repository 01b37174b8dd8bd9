"""The Fetcher: the only outbound HTTP client, and the one place aiohttp errors are translated.

Every request goes through a connector owned by one policy (so DNS answers and pooled
connections never cross policies), whose resolver checks every address before aiohttp may
connect to it, and whose sockets all come from the policy's `SocketGuard` (`fetch.dial`),
which classifies the exact address dialled, names and IP literals alike. Redirects are
followed here, by hand: each hop is planned by the policy's redirect rules and decided from
step 1. Bodies are streamed through a decoder that stops at `max_response_bytes` after
decompression. Timeouts: connect and read per socket operation, and one total deadline over
every hop and the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import ssl
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

from gateway import __version__
from gateway.errors import (
    GatewayError,
    PolicyDeniedError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.fetch.decode import ACCEPT_ENCODING, BoundedDecoder, parse_content_encoding
from gateway.fetch.dial import SocketGuard, SocketRefusedError
from gateway.fetch.dial import connector as dial_connector
from gateway.fetch.resolver import AddressDeniedError, PolicyResolver, StaticHosts
from gateway.fetch.strict_protocol import use_strict_responses
from gateway.policy.engine import Decision, decide_answer, decide_content_type
from gateway.policy.hints import refusal_text
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.redirects import AmbiguousRedirectError, plan_redirect
from gateway.policy.urls import Target
from gateway.wire import http1

DEFAULT_USER_AGENT = f"agent-egress-gateway/{__version__} (+policy-enforcing fetcher)"
ACCEPT = "text/html,application/xhtml+xml,application/json;q=0.9,text/*;q=0.8,*/*;q=0.1"
REDIRECT_BODY_DRAIN = 64 * 1024


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
        self._sessions: dict[tuple[str, str, str], aiohttp.ClientSession] = {}
        # Built once, copied per request: a request pays one C-level copy, not three inserts.
        self._base_headers: CIMultiDict[str] = CIMultiDict(
            {"User-Agent": self.user_agent, "Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING}
        )
        self._timeouts: dict[tuple[float, float], aiohttp.ClientTimeout] = {}
        self._closing: set[asyncio.Task[None]] = set()

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

    def _session(self, policy: Policy) -> aiohttp.ClientSession:
        key = pool_key(policy)
        session = self._sessions.get(key)
        if session is None or session.closed:
            resolver = PolicyResolver(
                policy,
                static_hosts=self._static_hosts,
                own_addresses=self._own,
                lookup_timeout=policy.timeouts.connect,
            )
            connector = dial_connector(
                SocketGuard(policy, self._own),
                resolver=resolver,
                ssl_context=self._ssl,
                limit=self._pool_limit,
                ttl_dns_cache=10,
            )
            use_strict_responses(connector)
            session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # environment proxies never apply
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,  # decoded here, under the size cap
                # http1's reader saw every byte first; these only keep aiohttp from being
                # stricter than it on a line it already accepted.
                max_line_size=http1.MAX_LINE + 2,
                max_field_size=http1.MAX_LINE + 2,
                max_headers=http1.MAX_HEADERS,
                timeout=aiohttp.ClientTimeout(total=None),
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
            self._sessions[key] = session
        return session

    def retire(self, policy: Policy) -> None:
        """Close a policy's pool, idle and busy connections alike (a reload dropped the
        policy; the caller waited for requests in flight). A later request under the same
        policy would open a new pool."""
        session = self._sessions.pop(pool_key(policy), None)
        if session is not None:
            task = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

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
        hops = 0
        while True:
            async with self.open(policy, trace, options, method=method) as response:
                status = response.status
                plan = None
                if options.follow_redirects:
                    try:
                        plan = plan_redirect(
                            policy,
                            trace.current,
                            status,
                            response.headers.getall("Location", []),
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
                    await _drain(response)
                    trace.current = plan.target
                    method = plan.method
                    hops += 1
                    continue
                if options.check_content_type:
                    type_decision = decide_content_type(
                        policy, response.headers.get("Content-Type")
                    )
                    if type_decision.reason is not None:
                        # A refusal, or one report mode let through: either way the record
                        # names the reason and rule (enforced: false for the second).
                        trace.decision = type_decision
                    if not type_decision.allowed:
                        raise PolicyDeniedError(type_decision, refusal_text(type_decision))
                body = await self._read_body(response, max_bytes, trace, method)
                return FetchResult(
                    target=trace.current,
                    status=status,
                    headers=response.headers,
                    body=body,
                    body_sha256=hashlib.sha256(body).hexdigest(),
                    ip=trace.ip,
                    trace=trace,
                )

    @contextlib.asynccontextmanager
    async def open(
        self,
        policy: Policy,
        trace: FetchTrace,
        options: FetchOptions,
        *,
        method: str | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request to `trace.current`, no redirects: the response after its head, released
        on leaving the block; aiohttp failures while it is read become the gateway's errors."""
        response = await self.send(policy, trace, options, method=method)
        try:
            yield response
        except GatewayError:
            raise
        except Exception as exc:
            raise translate_error(exc, before_head=False) from exc
        finally:
            response.release()

    async def send(
        self,
        policy: Policy,
        trace: FetchTrace,
        options: FetchOptions,
        *,
        method: str | None = None,
    ) -> aiohttp.ClientResponse:
        """`open` without the context manager, for hot paths: the caller must `release()` the
        response and translate failures while reading it (`translate_error`).

        Address checks happen in the resolver (names) or here (IP literals); every aiohttp
        failure up to the response head is translated into the gateway's errors.
        """
        target = trace.current
        if target.ip is not None:
            decision = decide_answer(policy, target.port, [target.ip], own_addresses=self._own)
            if not decision.allowed:
                trace.decision = decision
                raise PolicyDeniedError(decision, refusal_text(decision))
        headers = self._base_headers
        if options.headers:
            headers = headers.copy()
            headers.update(options.headers)
        session = self._sessions.get(pool_key(policy))
        if session is None or session.closed:
            session = self._session(policy)
        try:
            response = await session.request(
                method or options.method,
                target.url,
                headers=headers,
                data=options.body,
                allow_redirects=False,
                timeout=self._timeout(
                    options.connect_timeout or policy.timeouts.connect,
                    options.read_timeout or policy.timeouts.read,
                ),
                max_redirects=0,
            )
        except (AddressDeniedError, SocketRefusedError) as exc:
            trace.decision = exc.decision
            raise PolicyDeniedError(exc.decision, refusal_text(exc.decision)) from None
        except Exception as exc:
            raise translate_error(exc, before_head=True) from exc
        trace.status = response.status
        trace.ip = _peer_ip(response) or (str(target.ip) if target.ip else None)
        return response

    def _timeout(self, connect: float, read: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get((connect, read))
        if timeout is None:
            if len(self._timeouts) >= 64:  # a few policies' values; never grows without bound
                self._timeouts.clear()
            sock_read = None if read == math.inf else read
            # Per socket operation: the TCP connect here, the DNS lookup in the resolver (so a
            # name server that never answers is a lookup that failed, upstream_unreachable);
            # waiting for a pooled connection is bounded by the total deadline.
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=connect, sock_read=sock_read
            )
            self._timeouts[(connect, read)] = timeout
        return timeout

    async def _read_body(
        self, response: aiohttp.ClientResponse, max_bytes: int, trace: FetchTrace, method: str
    ) -> bytes:
        if method == "HEAD":
            return b""
        coding = parse_content_encoding(response.headers.getall("Content-Encoding", []))
        declared = response.content_length
        if coding is None and declared is not None and declared > max_bytes:
            raise ResponseTooLargeError(
                f"the response declares {declared} bytes, over max_response_bytes ({max_bytes})"
            )
        decoder = BoundedDecoder(coding, max_bytes)
        raw_limit = max_bytes + 1024 * 1024  # compressed input is normally far smaller
        raw = 0
        parts: list[bytes] = []
        async for chunk in response.content.iter_any():
            raw += len(chunk)
            if raw > raw_limit:
                raise ResponseTooLargeError(
                    f"the response body exceeded max_response_bytes ({max_bytes} bytes)"
                )
            parts.extend(decoder.feed(chunk))
            trace.body_bytes = decoder.decoded
        parts.extend(decoder.finish())
        trace.body_bytes = decoder.decoded
        return b"".join(parts)


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


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read a small redirect body so the connection can be reused; close a large one."""
    length = response.content_length
    if length is not None and length <= REDIRECT_BODY_DRAIN:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            await response.content.readexactly(length) if length else None
            return
    response.close()


def _peer_ip(response: aiohttp.ClientResponse) -> str | None:
    # A small body may already have released the connection; the protocol (and its
    # transport, now pooled) stays on the response.
    protocol = response.connection.protocol if response.connection else response._protocol
    transport = protocol.transport if protocol is not None else None
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if peer else None


def translate_error(exc: BaseException, *, before_head: bool) -> GatewayError:
    """aiohttp and OS failures -> the gateway's errors; the most specific match first."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamTimeoutError("the upstream did not accept the connection in time")
    if isinstance(exc, aiohttp.SocketTimeoutError | asyncio.TimeoutError | TimeoutError):
        return UpstreamTimeoutError("the upstream stopped sending (timeouts.read)")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return UpstreamUnreachableError("the host name did not resolve")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return UpstreamUnreachableError(
            f"the upstream's TLS certificate failed: {exc.certificate_error}"
        )
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return UpstreamUnreachableError("the TLS handshake with the upstream failed")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnreachableError(
            "the upstream refused or dropped the connection"
            f" ({exc.os_error.strerror or exc.os_error})"
        )
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamError("the upstream's body was broken (short, bad chunking or reset)")
    if isinstance(exc, aiohttp.ClientResponseError):
        return UpstreamError(f"the upstream's response was malformed: {exc.message[:200]}")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | ConnectionError):
        if before_head:
            return UpstreamUnreachableError("the upstream closed the connection before answering")
        return UpstreamError("the upstream closed the connection mid-body")
    if isinstance(exc, aiohttp.InvalidURL):
        return UpstreamError("the upstream URL could not be used")
    if isinstance(exc, aiohttp.ClientError):
        return UpstreamError(f"the upstream request failed: {type(exc).__name__}")
    raise exc
