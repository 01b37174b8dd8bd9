"""The compiled, immutable policy: what `load.py` produces and `engine.py` reads.

Everything here is already validated and normalised; nothing in it can fail at decision time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gateway.policy.dlp import DlpSettings
from gateway.policy.hosts import HostIndex, HostPattern

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

TOOL_NAMES = ("WebFetch", "WebSearch", "XSearch")


class Mode(StrEnum):
    ENFORCE = "enforce"
    REPORT = "report"


class Action(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class ResultsHandling(StrEnum):
    DROP = "drop"
    MARK = "mark"


@dataclass(frozen=True, slots=True)
class DomainRule:
    pattern: HostPattern
    rule_id: str  # "domains.allow[0]"
    message: str | None = None


@dataclass(frozen=True, slots=True)
class NetworkRule:
    network: IPNetwork
    rule_id: str  # "networks.deny[1]"


@dataclass(frozen=True, slots=True)
class ToolSettings:
    enabled: bool
    results: ResultsHandling = ResultsHandling.DROP


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 5.0
    read: float = 15.0
    total: float = 30.0


DEFAULT_CONTENT_TYPES = (
    "text/*",
    "application/json",
    "application/*+json",
    "application/xml",
    "application/*+xml",
    "application/xhtml+xml",
)


@dataclass(frozen=True, slots=True)
class Limits:
    max_response_bytes: int = 10_485_760
    default_max_chars: int = 20_000
    max_chars: int = 200_000
    content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """Caps on what the forward proxy relays for a plain-HTTP request, off (None) by default
    so package managers keep working: proxied traffic streams, so the cap on bytes cuts the
    stream past it, and the content types are checked on the response head."""

    max_response_bytes: int | None = None
    content_types: tuple[str, ...] | None = None


_DISABLED = ToolSettings(False)


def default_tools() -> Mapping[str, ToolSettings]:
    return MappingProxyType(
        {
            "WebFetch": ToolSettings(True),
            "WebSearch": ToolSettings(True),
            "XSearch": ToolSettings(False),
        }
    )


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    sha256: str  # of the file's bytes
    source: str = "<embedded default>"
    version: int = 1
    mode: Mode = Mode.ENFORCE
    default: Action = Action.DENY
    schemes: tuple[str, ...] = ("https", "http")
    ports: tuple[int, ...] = (443, 80)
    methods: tuple[str, ...] = ("GET", "HEAD")
    domain_allow: tuple[DomainRule, ...] = ()
    domain_deny: tuple[DomainRule, ...] = ()
    block_private: bool = True
    network_allow: tuple[NetworkRule, ...] = ()
    network_deny: tuple[NetworkRule, ...] = ()
    max_redirects: int = 5
    allow_downgrade: bool = False
    timeouts: Timeouts = Timeouts()
    limits: Limits = Limits()
    proxy_limits: ProxyLimits = ProxyLimits()
    tools: Mapping[str, ToolSettings] = field(default_factory=default_tools)
    dlp: DlpSettings = DlpSettings()  # outbound data-loss prevention; off unless set
    # Indexes built from the rules above; lookups cost one probe per label.
    allow_index: HostIndex = field(init=False, repr=False, compare=False)
    deny_index: HostIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_index", HostIndex(r.pattern for r in self.domain_allow))
        object.__setattr__(self, "deny_index", HostIndex(r.pattern for r in self.domain_deny))

    def tool(self, name: str) -> ToolSettings:
        """Settings of a tool; `Research` is enabled only when WebSearch and WebFetch are."""
        if name == "Research":
            enabled = self.tool("WebFetch").enabled and self.tool("WebSearch").enabled
            return ToolSettings(enabled, self.tool("WebSearch").results)
        return self.tools.get(name, _DISABLED)

    @property
    def identity(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.sha256}
