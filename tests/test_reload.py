"""Live reload: file changes are seen by content (a touch is not a change), a broken file
keeps the running state and reports every problem, restart-only keys are kept and listed."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import signal
import threading
from pathlib import Path

import pytest

from gateway.config import ClientConfig, ListenConfig
from gateway.configload import load_config_file, watched_files
from gateway.reload import (
    ReloadController,
    fingerprint_config_source,
    fingerprint_files,
    startup_fingerprints,
)
from gateway.runtime import Services, load_policy_state


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


def edit(path: Path, text: str) -> None:
    path.write_text(text)
    bump(path)


async def test_a_policy_change_reloads_with_old_and_new_hash(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    assert controller.changed() == []
    old_sha = services.state.default_policy.sha256
    (tmp / "p.yaml").write_text("name: second\ndomains: {allow: [b.example.com]}\n")
    bump(tmp / "p.yaml")
    assert controller.changed() == [str(tmp / "p.yaml")]
    assert await controller.reload("test")
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


BROKEN = [
    # (id, file, its broken text, whether the controller re-reads the config, problems named)
    (
        "policy",
        "p.yaml",
        "name: broken\nmode: maybe\nunknown_key: 1\n",
        True,
        ("unknown_key", "mode"),
    ),
    ("policy without config", "p.yaml", "name: broken\nmode: maybe\n", False, ("mode",)),
    ("config", "gateway.yaml", "listen: {port: seventy}\npolicy: p.yaml\n", True, ("port",)),
]


@pytest.mark.parametrize(
    ("name", "text", "with_config", "named"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
async def test_a_broken_file_keeps_the_running_state_and_reports(
    setup, name: str, text: str, with_config: bool, named: tuple[str, ...]
) -> None:
    """Reading and compiling run in a worker thread; a failure there changes nothing."""
    tmp, services = setup
    load = (lambda: load_config_file(tmp / "gateway.yaml")) if with_config else None
    controller = ReloadController(services, load)
    state_before, config_before = services.state, services.config
    edit(tmp / name, text)
    assert controller.changed() == [str(tmp / name)]
    assert not await controller.reload("test")
    assert services.state is state_before and services.config is config_before
    status = services.reload_status
    assert not status.ok and len(status.problems) >= len(named)
    for word in named:
        assert any(word in p for p in status.problems), word
    [record] = reload_records(services)
    assert record["event"]["outcome"] == "failure" and record["reload"]["new"] is None
    assert controller.changed() == []  # the broken bytes are not retried every second


async def test_a_good_config_naming_a_broken_policy_applies_none_of_it(setup) -> None:
    """The new clients come only with their policies: a broken one keeps the old clients, and
    is watched until it loads."""
    tmp, services = setup
    controller = ReloadController(services, lambda: load_config_file(tmp / "gateway.yaml"))
    state_before, config_before = services.state, services.config
    (tmp / "bad.yaml").write_text("mode: maybe\n")
    client = CLIENT.format(digest=hashlib.sha256(b"tok").hexdigest()) + "    policy: bad.yaml\n"
    edit(tmp / "gateway.yaml", (tmp / "gateway.yaml").read_text() + client)
    assert not await controller.reload("test")
    assert services.state is state_before and services.config is config_before
    assert services.state.clients == ()
    assert any("mode" in p for p in services.reload_status.problems)
    assert controller.changed() == []  # the new policy file was fingerprinted before reading
    # Fixing the policy the new configuration names reloads, like any watched file's edit.
    edit(tmp / "bad.yaml", "name: fixed\n")
    assert controller.changed() == [str(tmp / "bad.yaml")]
    assert await controller.reload("test")
    [agent] = services.state.clients
    assert agent.policy.name == "fixed"
    assert controller.changed() == []


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
    assert await controller.reload("test")
    assert [c.id for c in services.state.clients] == ["agent"]
    assert controller.restart_needed == ("instance_id",)
    assert services.config.instance_id == "t"  # not applied live
    assert (await controller.status())["restart_needed"] == ["instance_id"]


async def test_hooks_see_old_and_new_state(setup) -> None:
    tmp, services = setup
    seen = []
    services.on_reload.append(lambda old, new: seen.append((old.default_policy.name, new)))
    controller = ReloadController(services, None)
    (tmp / "p.yaml").write_text("name: third\n")
    assert await controller.reload("test")
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


async def test_an_edit_while_a_reload_reads_is_loaded_by_the_next_poll(setup) -> None:
    """The edit lands after the reload read the policy and before anything else looks at the
    file: the watcher must not take the new bytes for the ones it loaded."""
    tmp, services = setup
    policy = tmp / "p.yaml"

    edits = ["name: edited-meanwhile\n"]

    def load_then_edit(config):
        state = load_policy_state(config)
        if edits:
            edit(policy, edits.pop())
        return state

    controller = ReloadController(services, None, load_state=load_then_edit)
    edit(policy, "name: second\n")
    assert await controller.reload("test")
    assert services.state.default_policy.name == "second"
    assert controller.changed() == [str(policy)]
    assert await controller.reload("test")
    assert services.state.default_policy.name == "edited-meanwhile"
    assert controller.changed() == []


async def test_an_edit_while_the_config_is_read_is_loaded_by_the_next_poll(setup) -> None:
    tmp, services = setup
    config_path = tmp / "gateway.yaml"
    digest = hashlib.sha256(b"tok").hexdigest()

    def read_then_edit():
        config = load_config_file(config_path)
        edit(config_path, config_path.read_text() + CLIENT.format(digest=digest))
        return config

    controller = ReloadController(services, read_then_edit)
    edit(tmp / "p.yaml", "name: second\n")
    assert await controller.reload("test")
    assert services.state.clients == ()
    assert controller.changed() == [str(config_path)]


async def test_a_file_edited_within_the_mtime_granularity_is_hashed_again(setup) -> None:
    """Same size and, on a coarse clock, the same mtime: only the digest can tell."""
    tmp, services = setup
    policy = tmp / "p.yaml"
    controller = ReloadController(services, None)
    st = policy.stat()
    policy.write_text(policy.read_text().replace("first", "fifth"))
    os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns))  # as if the clock had not ticked
    assert policy.stat().st_size == st.st_size
    assert controller.changed() == [str(policy)]


async def test_the_startup_fingerprint_sees_an_edit_made_while_services_were_built(
    tmp_path: Path,
) -> None:
    (tmp_path / "p.yaml").write_text("name: first\n")
    write_config(tmp_path / "gateway.yaml", "p.yaml")
    config = load_config_file(tmp_path / "gateway.yaml")
    loaded = fingerprint_files(watched_files(config))
    services = Services(config)
    services.open()
    try:
        edit(tmp_path / "p.yaml", "name: edited-at-startup\n")
        controller = ReloadController(services, None, seen=loaded)
        assert controller.changed() == [str(tmp_path / "p.yaml")]
    finally:
        services.audit.close()


@pytest.mark.parametrize("edited", ["gateway.yaml", "p.yaml"])
async def test_the_startup_fingerprints_see_an_edit_made_while_the_config_was_read(
    tmp_path: Path, edited: str
) -> None:
    # serve's order: the config file fingerprinted, read; the policies fingerprinted, read.
    (tmp_path / "p.yaml").write_text("name: first\n")
    write_config(tmp_path / "gateway.yaml", "p.yaml")
    config_seen = fingerprint_config_source(str(tmp_path / "gateway.yaml"))
    config = load_config_file(tmp_path / "gateway.yaml")
    edit(tmp_path / edited, (tmp_path / edited).read_text() + "# edited while read\n")
    loaded = startup_fingerprints(config, config_seen)
    services = Services(config)
    services.open()
    try:
        controller = ReloadController(services, None, seen=loaded)
        # The config edit is seen by its earlier fingerprint; a policy edit made before
        # serve fingerprinted the policies is already in what the services read.
        assert controller.changed() == (
            [str(tmp_path / edited)] if edited == "gateway.yaml" else []
        )
    finally:
        services.audit.close()


async def test_reading_and_compiling_run_off_the_event_loop(setup) -> None:
    """The loader blocks until a coroutine on the loop lets it go: a reload on the loop would
    never let it run (the loader's wait would time out and it would report so)."""
    tmp, services = setup
    started, release = threading.Event(), threading.Event()
    waited: list[bool] = []

    def slow_load(config):
        started.set()
        waited.append(release.wait(timeout=30))
        return load_policy_state(config)

    controller = ReloadController(services, None, load_state=slow_load)
    edit(tmp / "p.yaml", "name: second\n")
    reloading = asyncio.ensure_future(controller.reload("test"))
    ticks = 0
    while not started.is_set():
        await asyncio.sleep(0.001)
    while ticks < 20:  # the loop keeps running other work while the loader is busy
        await asyncio.sleep(0)
        ticks += 1
    assert not reloading.done() and services.state.default_policy.name == "first"
    release.set()
    assert await reloading
    assert waited == [True]
    assert services.state.default_policy.name == "second"


async def test_sighup_reloads_through_the_thread(setup) -> None:
    tmp, services = setup
    controller = ReloadController(services, None)
    edit(tmp / "p.yaml", "name: by-sighup\n")
    loop = asyncio.get_running_loop()
    controller.install_sighup()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(3000):
            if controller.reloads:
                break
            await asyncio.sleep(0.01)
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
    assert controller.reloads == 1
    assert services.state.default_policy.name == "by-sighup"


async def test_close_waits_for_a_reload_started_without_waiting(setup) -> None:
    """A reload SIGHUP starts is a task the controller keeps: closing waits for it, so it is
    never cut off (or left running) when the services close."""
    tmp, services = setup
    controller = ReloadController(services, None)
    edit(tmp / "p.yaml", "name: started-soon\n")
    controller.reload_soon("test")
    assert controller.reloads == 0  # started, not finished
    await controller.close()
    assert controller.reloads == 1
    assert services.state.default_policy.name == "started-soon"
