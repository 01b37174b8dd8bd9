"""Key rotation at reload: a transition checkpoint signed by both keys, responses signed with
the new key from then on, the old key still verifying older records and published as retired."""

from __future__ import annotations

from dataclasses import replace

import orjson

from gateway.audit.verify import verify_files
from gateway.config import AuditConfig
from gateway.provenance.dsse import generate_keypair, load_public_key
from gateway.provenance.envelope import verify_response
from gateway.runtime import Services
from gateway.tools.context import CallContext
from tests.conftest import loopback_policy


async def test_signing_key_rotation_on_reload(
    tmp_path, upstream, write_policy, make_config
) -> None:
    _, old_pub, old_id = generate_keypair(tmp_path / "old")
    _, new_pub, new_id = generate_keypair(tmp_path / "new")
    audit_path = str(tmp_path / "audit.jsonl")
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        signing_key=str(tmp_path / "old" / "signing.key"),
        audit=AuditConfig(path=audit_path),
    )
    services = Services(config)
    services.open()
    url = f"http://site.example.com:{upstream.port}/page"
    try:
        ctx = CallContext(policy=services.state.default_policy)
        before = await services.webfetch.call(ctx, {"url": url})
        assert before["dsse"]["signatures"][0]["keyid"] == old_id
        assert services.reload(replace(config, signing_key=str(tmp_path / "new" / "signing.key")))
        after = await services.webfetch.call(
            CallContext(policy=services.state.default_policy), {"url": url}
        )
        assert after["dsse"]["signatures"][0]["keyid"] == new_id
        assert [k.public_bytes_raw() for k in services.retired_keys] == [
            load_public_key(old_pub).public_bytes_raw()
        ]
    finally:
        await services.close()
    old_key, new_key = load_public_key(old_pub), load_public_key(new_pub)
    verify_response(before, [old_key])
    verify_response(after, [new_key])
    with open(audit_path, "rb") as handle:
        records = [orjson.loads(line) for line in handle]
    checkpoints = [r["checkpoint"] for r in records if r["event"]["action"] == "checkpoint"]
    assert [c["keyids"] for c in checkpoints if len(c["keyids"]) == 2] == [[old_id, new_id]]
    assert checkpoints[-1]["keyids"] == [new_id]
    assert all(r.valid for r in verify_files([audit_path], public_keys=[old_key, new_key]))
