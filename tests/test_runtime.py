"""The composition root's own duties: after a reload, the outbound pools of policies the
reload dropped close once requests in flight have had `server.shutdown_grace`."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import ServerConfig
from gateway.fetch.client import FetchOptions
from gateway.policy.engine import decide_url
from gateway.runtime import Services
from tests.conftest import loopback_policy

GRACE = 0.3


@pytest.mark.parametrize(
    ("versions", "first_pool_closed"),
    [
        (("# changed\n",), True),
        (("",), False),  # the same content: the same pool goes on
        (("# changed\n", ""), False),  # back in force before the grace ended
    ],
    ids=["dropped", "unchanged", "restored"],
)
async def test_a_dropped_policys_pool_closes_after_the_grace(
    upstream, write_policy, make_config, versions, first_pool_closed
) -> None:
    text = loopback_policy(upstream.port)
    path = write_policy(text)
    services = Services(make_config(path, server=ServerConfig(shutdown_grace=GRACE)))
    services.open()
    try:
        first = services.state.default_policy
        decision, target = decide_url(first, f"http://site.example.com:{upstream.port}/page")
        assert decision.allowed and target is not None
        await services.fetcher.fetch(first, target, FetchOptions())
        pool = services.fetcher.pool(first)
        assert pool is not None
        for extra in versions:
            write_policy(text + extra)
            assert services.reload()
        assert not pool.closed  # requests in flight may still use it
        await asyncio.sleep(GRACE * 3)
        assert pool.closed is first_pool_closed
        assert (services.fetcher.pool(first) is pool) is not first_pool_closed
        current = services.state.default_policy
        _, target = decide_url(current, f"http://site.example.com:{upstream.port}/page")
        assert target is not None
        result = await services.fetcher.fetch(current, target, FetchOptions())
        assert result.status == 200  # the policy in force fetches on, in its own pool
    finally:
        await services.close()


def test_dlp_fingerprint_key_file(tmp_path, make_config) -> None:
    """The configured key keys DLP fingerprints (the same secret, the same print across
    starts); a short key refuses to start; none draws a random key per start."""
    from gateway.runtime import read_fingerprint_key

    key_file = tmp_path / "dlp.key"
    key_file.write_bytes(b"0123456789abcdef0123456789abcdef\n")
    assert read_fingerprint_key(str(key_file)) == b"0123456789abcdef0123456789abcdef"
    assert read_fingerprint_key(None) is None

    def canary_print(services: Services) -> str:
        # What a finding under the policy in force would carry.
        return services.state.default_policy.dlp.fingerprint("canary", "tripwire-4c1f7a2b9e")

    first = Services(make_config(None, dlp_fingerprint_key=str(key_file)))
    print_one = canary_print(first)
    assert first.fingerprint_key == b"0123456789abcdef0123456789abcdef"
    second = Services(make_config(None, dlp_fingerprint_key=str(key_file)))
    assert canary_print(second) == print_one
    assert canary_print(Services(make_config(None))) != print_one
    key_file.write_bytes(b"short")
    with pytest.raises(OSError, match="needs at least 16"):
        read_fingerprint_key(str(key_file))
    del first, second


def test_a_client_is_found_again_after_a_reload_only_with_the_same_id_and_token() -> None:
    import hashlib

    from gateway.config import ClientLimits
    from gateway.policy.load import load_default_policy
    from gateway.runtime import ClientIdentity, PolicyState

    policy = load_default_policy()
    before = ClientIdentity("agent", hashlib.sha256(b"t").digest(), policy, ClientLimits())
    same = ClientIdentity("agent", hashlib.sha256(b"t").digest(), policy, ClientLimits(3))
    rotated = ClientIdentity("agent", hashlib.sha256(b"u").digest(), policy, ClientLimits())
    renamed = ClientIdentity("other", hashlib.sha256(b"t").digest(), policy, ClientLimits())
    assert PolicyState(policy, (rotated, same)).current(before) is same
    assert PolicyState(policy, (rotated, renamed)).current(before) is None
    assert PolicyState(policy).current(before) is None
