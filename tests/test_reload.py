"""Live reload: file changes are seen by content (a touch is not a change), a broken file
keeps the running state and reports every problem, restart-only keys are kept and listed."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from gateway.config import ClientConfig, ListenConfig
from gateway.configload import load_config_file
from gateway.reload import ReloadController
from gateway.runtime import Services


def write_config(path: Path, policy: str, clients: str = "") -> None:
    path.write_text(
        f"policy: {policy}\naudit: {{path: 'audit/g-{{instance}}.jsonl'}}\ninstance_id: t\n{clients}"
    )


CLIENT = """clients:
  - id: agent
    token_sha256: "{digest}"
"""


@pytest.fixture
def setup(tmp_path: Path):
    (tmp_path / "p.yaml").write_text("name: first\ndomains: {allow: [a.example.com]}\n")
    write_config(tmp_path / "gateway.yaml", "p.yaml")
    config = load_config_file(tmp_path / "gateway.yaml")
    services = Services(config)
    services.open()
    yield tmp_path, services
    services.audit.close()


def reload_records(services: Services) -> list[dict]:
    import orjson

    with open(services.audit.path, "rb") as handle:
        lines = [orjson.loads(line) for line in handle]
    return [r for r in lines if r["event"]["action"] == "policy_reload"]


def bump(path: Path) -> None:
    """Make sure the new mtime differs even on coarse clocks."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


async def test_a_policy_change_reloads_with_old_and_new_hash(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    assert controller.changed() == []
    old_sha = services.state.default_policy.sha256
    (tmp / "p.yaml").write_text("name: second\ndomains: {allow: [b.example.com]}\n")
    bump(tmp / "p.yaml")
    assert controller.changed() == [str(tmp / "p.yaml")]
    assert controller.reload("test")
    assert services.state.default_policy.name == "second"
    [record] = reload_records(services)
    assert record["policy"]["previous_sha256"] == old_sha
    assert record["policy"]["sha256"] == hashlib.sha256((tmp / "p.yaml").read_bytes()).hexdigest()
    assert controller.changed() == []


async def test_touch_without_change_does_not_reload(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    bump(tmp / "p.yaml")
    assert controller.changed() == []


async def test_a_broken_policy_keeps_the_running_state_and_reports(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    before = services.state
    (tmp / "p.yaml").write_text("name: broken\nmode: maybe\nunknown_key: 1\n")
    bump(tmp / "p.yaml")
    assert controller.changed()
    assert not controller.reload("test")
    assert services.state is before
    status = services.reload_status
    assert not status.ok and len(status.problems) >= 2
    assert any("unknown_key" in p for p in status.problems)
    assert any("mode" in p for p in status.problems)
    [record] = reload_records(services)
    assert record["event"]["outcome"] == "failure" and record["reload"]["new"] is None
    assert controller.changed() == []  # the broken bytes are not retried every second


async def test_clients_reload_live_and_restart_keys_are_kept(setup) -> None:
    tmp, services = setup
    digest = hashlib.sha256(b"tok").hexdigest()
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    (tmp / "gateway.yaml").write_text(
        (tmp / "gateway.yaml").read_text().replace("instance_id: t", "instance_id: other")
        + CLIENT.format(digest=digest)
    )
    bump(tmp / "gateway.yaml")
    assert controller.changed() == [str(tmp / "gateway.yaml")]
    assert controller.reload("test")
    assert [c.id for c in services.state.clients] == ["agent"]
    assert controller.restart_needed == ("instance_id",)
    assert services.config.instance_id == "t"  # not applied live
    assert (await controller.status())["restart_needed"] == ["instance_id"]


async def test_a_broken_config_file_keeps_everything(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    before = services.state
    (tmp / "gateway.yaml").write_text("listen: {port: seventy}\npolicy: p.yaml\n")
    bump(tmp / "gateway.yaml")
    assert not controller.reload("test")
    assert services.state is before and not services.reload_status.ok
    assert any("port" in p for p in services.reload_status.problems)


async def test_hooks_see_old_and_new_state(setup) -> None:
    tmp, services = setup
    seen = []
    services.on_reload.append(lambda old, new: seen.append((old.default_policy.name, new)))
    controller = ReloadController(services, None)
    (tmp / "p.yaml").write_text("name: third\n")
    assert controller.reload("test")
    assert seen == [("first", services.state)]


def test_restart_needed_lists_nested_keys(tmp_path: Path) -> None:
    from gateway.config import GatewayConfig
    from gateway.configload import restart_needed

    old = GatewayConfig()
    new = dataclasses.replace(
        old,
        listen=ListenConfig(port=9000),
        clients=(ClientConfig(id="a", token_sha256="0" * 64),),
    )
    assert restart_needed(old, new) == ("listen.port",)
