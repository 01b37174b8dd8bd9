"""The transport search (and XSearch) providers send through: the `Fetcher`, one origin each.

Every configured provider endpoint gets a synthesized policy that admits only the scheme, host
and port of its `base_url`, never follows a redirect, skips the content-type check, caps the
body at 5 MiB, and refuses private addresses unless the operator wrote `allow_private: true`
(metadata addresses always: the policy engine refuses them before any exemption). No client
policy applies here. Operator headers (API keys) are sent; nothing from an agent reaches this.
It implements `gateway.search.transport.ProviderTransport` by shape (fetch may not import
search); failures are the gateway's own errors, which the search chain classifies.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.errors import InvalidRequestError, PolicyDeniedError
from gateway.fetch.client import Fetcher, FetchOptions, FetchTrace
from gateway.policy.addresses import AddressKind, classify_address
from gateway.policy.engine import Decision, Reason
from gateway.policy.hosts import HostPattern, PatternKind
from gateway.policy.model import (
    Action,
    DomainRule,
    Limits,
    NetworkRule,
    Policy,
    Timeouts,
    ToolSettings,
)
from gateway.policy.urls import InvalidURLError, Target, parse_url

MAX_PROVIDER_RESPONSE_BYTES = 5 * 1024 * 1024
_RULE = "provider.base_url"
_ANY_CONTENT_TYPE = ("*/*",)

Origin = tuple[str, str, int]  # scheme, normalised host, port


class ProviderRequestLike(Protocol):
    """What `gateway.search.transport.ProviderRequest` carries."""

    @property
    def method(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def body(self) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """One configured provider's `base_url`, and whether it may live on a private address."""

    base_url: str
    allow_private: bool = False


@dataclass(frozen=True, slots=True)
class ProviderReply:
    """A provider's answer, shaped like `gateway.search.transport.ProviderResponse`."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes = field(repr=False)


def endpoint_policy(endpoint: ProviderEndpoint, timeout: float) -> Policy:
    """The policy one provider's calls run under; raises ValueError for an unusable base_url."""
    target = _origin_target(endpoint.base_url)
    material = f"{target.scheme}://{target.host}:{target.port} private={endpoint.allow_private}"
    domain_allow: tuple[DomainRule, ...] = ()
    network_allow: tuple[NetworkRule, ...] = ()
    if target.ip is None:
        pattern = HostPattern(PatternKind.EXACT, target.host, target.host)
        domain_allow = (DomainRule(pattern, _RULE),)
    else:
        public = classify_address(target.ip).kind is AddressKind.PUBLIC
        if not (public or endpoint.allow_private):
            raise ValueError(
                f"search provider base_url {endpoint.base_url!r} is a private address; "
                "set allow_private: true on a self-hosted provider"
            )
        # An allowed network exempts the address from block_private, never from the
        # metadata check, which the engine makes first.
        network_allow = (NetworkRule(ipaddress.ip_network(target.ip), _RULE),)
    return Policy(
        name=f"search provider {target.scheme}://{target.host}:{target.port}",
        sha256=hashlib.sha256(material.encode()).hexdigest(),
        source="<search provider>",
        default=Action.DENY,
        schemes=(target.scheme,),
        ports=(target.port,),
        methods=("GET", "POST"),
        domain_allow=domain_allow,
        block_private=not endpoint.allow_private,
        network_allow=network_allow,
        max_redirects=0,
        timeouts=Timeouts(connect=timeout, read=timeout, total=timeout),
        limits=Limits(
            max_response_bytes=MAX_PROVIDER_RESPONSE_BYTES, content_types=_ANY_CONTENT_TYPE
        ),
        tools={name: ToolSettings(False) for name in ("WebFetch", "WebSearch", "XSearch")},
    )


class FetcherProviderTransport:
    """`send()` reaches only the configured endpoints, each under its own synthesized policy."""

    def __init__(
        self, fetcher: Fetcher, endpoints: Iterable[ProviderEndpoint], *, timeout: float = 10.0
    ) -> None:
        self._fetcher = fetcher
        self._policies: dict[tuple[Origin, bool], Policy] = {}
        for endpoint in endpoints:
            target = _origin_target(endpoint.base_url)
            key = ((target.scheme, target.host, target.port), endpoint.allow_private)
            self._policies.setdefault(key, endpoint_policy(endpoint, timeout))

    async def send(
        self, request: ProviderRequestLike, *, timeout: float, allow_private: bool
    ) -> ProviderReply:
        try:
            target = parse_url(request.url)
        except InvalidURLError as exc:
            raise InvalidRequestError(f"the provider request URL does not parse: {exc}") from None
        origin = (target.scheme, target.host, target.port)
        policy = self._policies.get((origin, allow_private))
        if policy is None:
            raise PolicyDeniedError(
                _outside(target), "the request goes outside the provider's configured base_url"
            )
        options = FetchOptions(
            method=request.method,
            tool=None,
            headers=request.headers,
            body=request.body,
            max_bytes=MAX_PROVIDER_RESPONSE_BYTES,
            follow_redirects=False,
            check_content_type=False,
            total_timeout=timeout,
            read_timeout=timeout,
            connect_timeout=timeout,
        )
        trace = FetchTrace(requested=target, current=target)
        result = await self._fetcher.fetch_traced(policy, trace, options)
        return ProviderReply(result.status, result.headers, result.body)


def _origin_target(base_url: str) -> Target:
    try:
        target = parse_url(base_url)
    except InvalidURLError as exc:
        raise ValueError(f"search provider base_url {base_url!r} is not usable: {exc}") from None
    return target


def _outside(target: Target) -> Decision:
    return Decision(
        False,
        Reason.DOMAIN_NOT_ALLOWED,
        _RULE,
        "search provider",
        "",
        detail=f"{target.scheme}://{target.host}:{target.port}",
    )
