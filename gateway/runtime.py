"""The composition root: builds every service once from the configuration, and owns reloads.

Handlers get services from here (through aiohttp AppKeys), never from globals. A reload
builds a complete new `PolicyState` first and swaps it in one assignment, so a request sees
either the old state or the new one, and a file that fails validation changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gateway import __version__
from gateway.audit.log import AuditLog
from gateway.config import ClientLimits, GatewayConfig
from gateway.configload.serving import default_instance_id
from gateway.errors import AuditWriteError, UnauthorizedError
from gateway.fetch.client import Fetcher, pool_key
from gateway.fetch.provider import FetcherProviderTransport, ProviderEndpoint
from gateway.fetch.resolver import hosts_table, own_listening_addresses
from gateway.limits import InMemoryLimiter, Limiter
from gateway.metrics import Metrics, ObservedAuditLog
from gateway.policy import dlp

# PolicyValidationError: what building the services raises for a broken policy; the adapters
# catch it by this name (they never import gateway.policy).
from gateway.policy.load import PolicyValidationError, load_default_policy, load_policy_file
from gateway.policy.model import Policy
from gateway.provenance.dsse import DSSEError, Signer, keyid_of, load_public_key
from gateway.search.assembly import build_engine, chain_entries
from gateway.search.ids import IdStore, InMemoryIdStore
from gateway.search.providers import ADAPTERS
from gateway.state.wiring import connect_shared_state
from gateway.tools.authfailures import AuthFailureRecorder
from gateway.tools.envelope import now_iso
from gateway.tools.extraction import ExtractionPool
from gateway.tools.forward_traffic import ForwardTraffic
from gateway.tools.registry import ToolRegistry
from gateway.tools.research import ResearchTool
from gateway.tools.research import tool_spec as research_spec
from gateway.tools.sightings import HostSightings, InMemoryHostSightings
from gateway.tools.webfetch import FetchCache, WebFetchTool
from gateway.tools.webfetch import tool_spec as webfetch_spec
from gateway.tools.websearch import WebSearchTool
from gateway.tools.websearch import tool_spec as websearch_spec
from gateway.tools.xsearch import build_xsearch
from gateway.tools.xsearch import tool_spec as xsearch_spec


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    id: str
    token_sha256: bytes
    policy: Policy
    limits: ClientLimits = ClientLimits()
    role: str = "agent"  # a "reviewer" opens /review/ and nothing else

    @property
    def is_reviewer(self) -> bool:
        return self.role == "reviewer"


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything a reload replaces: the gateway's policy and the clients with theirs."""

    default_policy: Policy
    clients: tuple[ClientIdentity, ...] = ()
    loaded_at: str = field(default_factory=now_iso)

    @property
    def auth_required(self) -> bool:
        return bool(self.clients)

    def authenticate(self, authorization: str | None) -> ClientIdentity | None:
        """The client a bearer token belongs to; None when no clients are configured.

        Every configured hash is compared, in constant time, whatever matches.
        """
        if not self.clients:
            return None
        token = _bearer(authorization)
        if token is None:
            raise UnauthorizedError("missing bearer token: send 'Authorization: Bearer <token>'")
        return self.client_for_token(token)

    def current(self, client: ClientIdentity) -> ClientIdentity | None:
        """`client` as this state knows it (same id, same token; None: removed, or its token
        changed), with its policy of now: how a live connection is re-identified after a
        reload, by the same lookup a token gets."""
        found = self._client_for_digest(client.token_sha256)
        return found if found is not None and found.id == client.id else None

    def client_for_token(self, token: str) -> ClientIdentity:
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = self._client_for_digest(digest)
        if found is None:
            raise UnauthorizedError("unknown token")
        return found

    def _client_for_digest(self, digest: bytes) -> ClientIdentity | None:
        """The client whose token hashes to `digest`: every configured hash is compared, in
        constant time, whatever matches."""
        found = None
        for client in self.clients:
            if hmac.compare_digest(digest, client.token_sha256):
                found = client
        return found


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def load_policy_state(config: GatewayConfig) -> PolicyState:
    """Read every policy file the configuration names; raises PolicyValidationError."""
    default = load_policy_file(config.policy)[0] if config.policy else load_default_policy()
    cache: dict[str, Policy] = {}
    clients = []
    for client in config.clients:
        policy = default
        if client.policy:
            if client.policy not in cache:
                cache[client.policy] = load_policy_file(client.policy)[0]
            policy = cache[client.policy]
        clients.append(
            ClientIdentity(
                client.id, bytes.fromhex(client.token_sha256), policy, client.limits, client.role
            )
        )
    return PolicyState(default, tuple(clients))


def keyed_state(state: PolicyState, key: bytes) -> PolicyState:
    """`state` with every policy's DLP fingerprinting under `key` (a policy shared by
    several clients stays one policy)."""
    keyed: dict[int, Policy] = {}

    def key_policy(policy: Policy) -> Policy:
        if id(policy) not in keyed:
            keyed[id(policy)] = replace(policy, dlp=policy.dlp.keyed(key))
        return keyed[id(policy)]

    clients = tuple(replace(c, policy=key_policy(c.policy)) for c in state.clients)
    return replace(state, default_policy=key_policy(state.default_policy), clients=clients)


@dataclass(slots=True)
class ReloadStatus:
    last_reload: str | None = None
    ok: bool = True
    problems: tuple[str, ...] = ()


MIN_FINGERPRINT_KEY = 16


def read_fingerprint_key(path: str | None) -> bytes | None:
    """The bytes of `dlp_fingerprint_key` (surrounding white space dropped), at least 16 of
    them; None without the key, and DLP fingerprints then use a random key per start."""
    if path is None:
        return None
    with open(path, "rb") as handle:
        key = handle.read(4096).strip()
    if len(key) < MIN_FINGERPRINT_KEY:
        raise OSError(
            f"dlp_fingerprint_key {path!r} holds {len(key)} bytes; it needs at least "
            f"{MIN_FINGERPRINT_KEY} (e.g. head -c 32 /dev/urandom > FILE)"
        )
    return key


class Services:
    """Every long-lived service of one gateway process."""

    def __init__(self, config: GatewayConfig, *, state: PolicyState | None = None) -> None:
        self.config = config
        self.instance_id = config.instance_id or default_instance_id()
        self.state = state or load_policy_state(config)
        self.reload_status = ReloadStatus()
        self.started_monotonic = time.monotonic()
        self.started_at = now_iso()
        self.draining = False
        # Sections of /v1/status that later services add (search providers, limits, …).
        self.status_providers: dict[str, Callable[[], Awaitable[Any]]] = {}
        self._load_keys(config)
        self._open_audit(config)
        self._connect_outbound(config)
        self._build_search_engine(config)
        self._build_tools(config)
        self._prepare_hooks()

    def _load_keys(self, config: GatewayConfig) -> None:
        """The response signer, the retired public keys, the DLP fingerprint key."""
        self.signer = Signer.from_pem_file(config.signing_key) if config.signing_key else None
        self.retired_keys = tuple(load_public_key(path) for path in config.retired_keys)
        # One key for every policy of this process (a random one when none is configured),
        # so prints of one secret correlate across clients and reloads.
        self.fingerprint_key = (
            read_fingerprint_key(config.dlp_fingerprint_key) or dlp.random_fingerprint_key()
        )
        self.state = keyed_state(self.state, self.fingerprint_key)
        # keyid -> when a rotation at reload retired it (its /v1/keys not_after).
        self.retired_at: dict[str, str] = {}

    def _open_audit(self, config: GatewayConfig) -> None:
        """The metrics, and the audit log they observe (opened by `open`)."""
        self.metrics = Metrics(
            instance_id=self.instance_id,
            version=__version__,
            shared_state=config.state.redis is not None,
        )
        self.metrics.set_clients(c.id for c in self.state.clients)
        self.audit: AuditLog = ObservedAuditLog(
            config.audit.path,
            metrics=self.metrics,
            instance_id=self.instance_id,
            version=__version__,
            fsync=config.audit.fsync,
            rotate_bytes=config.audit.rotate_bytes,
            signer=self.signer,
            checkpoints_path=config.audit.checkpoints_path,
            checkpoint_interval=config.audit.checkpoint_interval,
        )

    def _connect_outbound(self, config: GatewayConfig) -> None:
        """The one outbound client, the extraction threads and processes, and the state
        replicas share."""
        self.fetcher = Fetcher(
            static_hosts=hosts_table(
                config.resolver.hosts, system_hosts=config.resolver.system_hosts
            ),
            ca_file=config.tls.ca_file,
            user_agent=config.fetch.user_agent,
        )
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="extract")
        # WebFetch's HTML extraction: worker processes, off the event loop's GIL
        self.extraction_pool = ExtractionPool()
        # state.redis: limits, search cache, provider health and ids shared across replicas.
        self.shared = connect_shared_state(config, self.instance_id, self.metrics)
        # Where each client met each host, for dlp.untrusted_hosts (bounded, per client).
        self.sightings: HostSightings = (
            self.shared.sightings if self.shared else InMemoryHostSightings()
        )
        self.ids: IdStore = (
            self.shared.ids
            if self.shared
            else InMemoryIdStore(ttl=config.search.id_ttl, clock=time.monotonic)
        )

    def _build_search_engine(self, config: GatewayConfig) -> None:
        """The search providers' chain (WebSearch's and Research's), with its status."""
        # Search: providers reached through the same pinned client, each only at its base_url.
        self.search_transport = FetcherProviderTransport(
            self.fetcher,
            [
                ProviderEndpoint(p.base_url or ADAPTERS[p.kind].default_base_url, p.allow_private)
                for p in chain_entries(config.search, os.environ)
                if p.base_url or p.kind in ADAPTERS
            ],
            timeout=config.search.timeout,
        )
        self.search = build_engine(
            config.search,
            self.search_transport,
            time.time,
            health=self.shared.health if self.shared else None,
            cache=self.shared.search_cache if self.shared else None,
        )
        self.status_providers["search"] = self.search.status

    def _build_tools(self, config: GatewayConfig) -> None:
        """Every tool, each registered from its own spec."""
        # With the audit log: a call refused before its tool recorded anything still gets
        # its one record.
        self.tools = ToolRegistry(audit=self.audit)
        # Failed credentials, per source address: recorded once per window with a count.
        self.auth_failures = AuthFailureRecorder(self.audit)
        self.webfetch = WebFetchTool(
            fetcher=self.fetcher,
            audit=self.audit,
            executor=self.executor,
            signer=self.signer,
            ids=self.ids,
            cache=FetchCache(config.fetch.cache_ttl),
            sightings=self.sightings,
            pool=self.extraction_pool,
        )
        self.tools.add(webfetch_spec(self.webfetch))
        self.websearch = WebSearchTool(
            engine=self.search,
            audit=self.audit,
            ids=self.ids,
            signer=self.signer,
            sightings=self.sightings,
        )
        self.tools.add(websearch_spec(self.websearch))
        self.tools.add(
            research_spec(
                ResearchTool(
                    websearch=self.websearch,
                    webfetch=self.webfetch,
                    audit=self.audit,
                    cache=ResearchTool.cache_for(config.search.cache_ttl, time.monotonic),
                )
            )
        )
        self.xsearch = build_xsearch(
            config.x_search, self.fetcher, self.audit, self.executor, self.signer
        )
        self.tools.add(xsearch_spec(self.xsearch))

    def forward_traffic(self) -> ForwardTraffic:
        """The forward proxy's use case, over the one outbound client's hosts table and own
        addresses; each proxy listener gets its own (with its own upstream pool)."""
        return ForwardTraffic(fetcher=self.fetcher, sightings=self.sightings)

    def _prepare_hooks(self) -> None:
        """The hooks other parts add to (listeners, drain, reload, close), the limiter and
        the readiness checks."""
        # Extra listeners (the forward proxy) started after the API: each returns its binds.
        self.extra_sites: list[Callable[[Services], Awaitable[list[tuple[str, int]]]]] = []
        # Called when draining starts (stop accepting tunnels, …).
        self.on_drain: list[Callable[[], Awaitable[None]]] = []
        # Called with (old, new) after a reload swapped the state (the proxy closes tunnels
        # of removed clients or now-denied destinations).
        self.on_reload: list[Callable[[PolicyState, PolicyState], None]] = []
        self.on_reload.append(self._retire_dropped_pools)
        # Called first when the services close (the proxy ends what is still open).
        self.on_close: list[Callable[[], Awaitable[None]]] = []
        # Per-client request and concurrency limits; a shared store may replace it.
        self.limiter: Limiter = self.shared.limiter if self.shared else InMemoryLimiter()
        # Checks /readyz runs; each returns a problem or None.
        self.readiness_checks: list[Callable[[], str | None]] = [self._audit_problem]
        self.metrics.add_refresher(self._refresh_search_metrics)
        if self.shared is not None:
            self.readiness_checks.append(self.shared.state.readiness_problem)
            shared_state = self.shared.state

            async def shared_status() -> dict[str, Any]:
                return shared_state.status()

            self.status_providers["shared_state"] = shared_status

    async def _refresh_search_metrics(self) -> None:
        status = await self.search.status()
        self.metrics.set_search(status["providers"], status["cache"])

    def _audit_problem(self) -> str | None:
        status = self.audit.status()
        return None if status["healthy"] else f"audit log unusable: {status['error']}"

    def readiness_problems(self) -> list[str]:
        problems = ["draining"] if self.draining else []
        problems.extend(p for check in self.readiness_checks if (p := check()) is not None)
        return problems

    def open(self) -> None:
        self.audit.open()

    async def listen_on(self, binds: Sequence[tuple[str, int]]) -> None:
        """The gateway's own listening addresses, which no fetch may reach
        (`networks.own_address`)."""
        await self.fetcher.set_own_addresses(own_listening_addresses(binds))

    async def close(self) -> None:
        for closer in self.on_close:
            await closer()
        await self.fetcher.close()
        if self.shared is not None:
            await self.shared.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.extraction_pool.close()
        with contextlib.suppress(AuditWriteError):  # the log has said it cannot be written
            self.auth_failures.flush(everything=True)
        self.audit.close()

    @property
    def uptime_s(self) -> float:
        return time.monotonic() - self.started_monotonic

    def _retire_dropped_pools(self, old: PolicyState, new: PolicyState) -> None:
        """Outbound pools of policies a reload dropped close after `server.shutdown_grace`,
        so requests in flight finish under the policy they started with; a policy back in
        force by then keeps its pool."""
        kept = _pooled_policies(new)
        dropped = [p for key, p in _pooled_policies(old).items() if key not in kept]
        if not dropped:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # pools live on a running loop: without one there are none

        def retire() -> None:
            in_force = _pooled_policies(self.state)
            for policy in dropped:
                if pool_key(policy) not in in_force:
                    self.fetcher.retire(policy)

        loop.call_later(self.config.server.shutdown_grace, retire)

    def reload_failed(self, problem: str) -> None:
        """A configuration file that did not load: keep everything, report it."""
        problems = tuple(problem.splitlines()) or ("reload failed",)
        self.reload_status = ReloadStatus(now_iso(), False, problems)
        self.audit.append(_reload_record(self.state, None, problems))

    def reload(self, config: GatewayConfig | None = None) -> bool:
        """Re-read policies (and clients, when a new config is given); keep the old state on
        any problem. Writes a `policy_reload` audit record either way."""
        try:
            new = load_policy_state(config or self.config)
        except (PolicyValidationError, OSError, ValueError) as exc:
            self.reload_failed(str(exc) or type(exc).__name__)
            return False
        return self.adopt_state(new, config)

    def adopt_state(self, new: PolicyState, config: GatewayConfig | None = None) -> bool:
        """Swap in a state loaded beforehand (the reload controller reads and compiles it in
        a thread), with the configuration it came from when one was given."""
        old = self.state
        self.state = new = keyed_state(new, self.fingerprint_key)
        self.metrics.set_clients(c.id for c in new.clients)
        key_problems: tuple[str, ...] = ()
        if config is not None:
            try:
                self._rotate_signing_key(config)
            except (DSSEError, OSError) as exc:  # keep signing with the old key
                key_problems = (f"signing key not rotated: {exc}",)
                config = replace(config, signing_key=self.config.signing_key)
            self.config = config
        self.reload_status = ReloadStatus(now_iso(), not key_problems, key_problems)
        self.audit.append(_reload_record(old, new, key_problems))
        for hook in self.on_reload:
            hook(old, new)
        return not key_problems

    def _rotate_signing_key(self, config: GatewayConfig) -> None:
        """A new `signing_key` at reload: the audit log writes a transition checkpoint signed
        by the old and the new key, responses are signed with the new key from now on, and
        the old public key stays published as retired."""
        if self.signer is None or not config.signing_key:
            return
        if config.signing_key == self.config.signing_key:
            return
        new = Signer.from_pem_file(config.signing_key)
        if new.keyid == self.signer.keyid:
            return
        old_public = self.signer.public_key
        self.audit.rotate_key(new)
        self.signer.adopt(new)
        self.retired_keys = (*self.retired_keys, old_public)
        self.retired_at[keyid_of(old_public)] = now_iso()


def _pooled_policies(state: PolicyState) -> dict[tuple[str, str, str], Policy]:
    policies = (state.default_policy, *(c.policy for c in state.clients))
    return {pool_key(policy): policy for policy in policies}


def _reload_record(
    old: PolicyState, new: PolicyState | None, problems: Sequence[str]
) -> dict[str, Any]:
    def policies(state: PolicyState) -> list[dict[str, str]]:
        seen = {
            (p.name, p.sha256): p
            for p in [state.default_policy, *(c.policy for c in state.clients)]
        }
        return [{"name": name, "sha256": sha} for name, sha in seen]

    return {
        "event": {
            "action": "policy_reload",
            "outcome": "success" if new is not None else "failure",
            "type": ["change"],
        },
        "policy": {
            "name": (new or old).default_policy.name,
            "sha256": (new or old).default_policy.sha256,
            "previous_sha256": old.default_policy.sha256,
        },
        "reload": {
            "old": policies(old),
            "new": policies(new) if new is not None else None,
            "problems": list(problems)[:50],
        },
    }
