"""Which hosts each client has met where: inside web content the gateway handed it (links in
fetched pages, search results) or in its own requests. The provenance-aware DLP check
(`dlp.untrusted_hosts`) asks whether a request goes to a host the client has only ever seen
inside web content: the injected "send it to this URL" pattern.

Memory is bounded: per client the most recent `max_hosts` hosts (LRU), and at most
`max_clients` clients (LRU). `state.redis` shares the sightings across replicas
(gateway/state/sightings.py); this in-memory store is the single-process one and the
fallback while Redis is down.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from gateway.policy.urls import InvalidURLError, parse_url

MAX_HOSTS_PER_CLIENT = 4096
MAX_CLIENTS = 1024
MAX_LINKS_PER_PAGE = 2000
IN_CONTENT = 1
REQUESTED = 2

# Absolute http(s) links in extracted text (Markdown link targets, bare URLs).
_LINK = re.compile(r"https?://[^\s/?#()<>\"'\]\[|]{1,253}", re.IGNORECASE)


class HostSightings(Protocol):
    async def seen_in_content(self, client: str, hosts: Iterable[str]) -> None: ...

    async def requested(self, client: str, host: str) -> None: ...

    async def only_from_content(self, client: str, host: str) -> bool: ...


class InMemoryHostSightings:
    """client -> host -> the ways the client met it (IN_CONTENT, REQUESTED bits), LRU."""

    def __init__(
        self, *, max_hosts: int = MAX_HOSTS_PER_CLIENT, max_clients: int = MAX_CLIENTS
    ) -> None:
        self._max_hosts = max_hosts
        self._max_clients = max_clients
        self._clients: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()

    def _hosts(self, client: str) -> OrderedDict[str, int]:
        hosts = self._clients.get(client)
        if hosts is None:
            hosts = self._clients[client] = OrderedDict()
            if len(self._clients) > self._max_clients:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(client)
        return hosts

    def _mark(self, client: str, host: str, bit: int) -> None:
        hosts = self._hosts(client)
        hosts[host] = hosts.get(host, 0) | bit
        hosts.move_to_end(host)
        if len(hosts) > self._max_hosts:
            hosts.popitem(last=False)

    async def seen_in_content(self, client: str, hosts: Iterable[str]) -> None:
        for host in hosts:
            self._mark(client, host, IN_CONTENT)

    async def requested(self, client: str, host: str) -> None:
        self._mark(client, host, REQUESTED)

    async def only_from_content(self, client: str, host: str) -> bool:
        hosts = self._clients.get(client)
        return hosts is not None and hosts.get(host, 0) == IN_CONTENT

    def size(self) -> int:
        return sum(len(hosts) for hosts in self._clients.values())


def hosts_in_text(text: str, *, limit: int = MAX_LINKS_PER_PAGE) -> set[str]:
    """The normalised hosts of the absolute links in `text`, at most `limit` of them."""
    found: set[str] = set()
    for match in _LINK.finditer(text):
        host = host_of(match.group())
        if host is not None:
            found.add(host)
            if len(found) >= limit:
                break
    return found


def host_of(url: str) -> str | None:
    """The normalised host of a URL (as the policy compares hosts), None if it does not parse."""
    try:
        return parse_url(url).host
    except InvalidURLError:
        return None
