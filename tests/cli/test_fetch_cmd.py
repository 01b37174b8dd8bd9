"""`gateway fetch URL`: the WebFetch path without a server; JSON on stdout, audit to its file."""

from __future__ import annotations

import orjson

from gateway.audit.verify import verify_files
from gateway.cli import main


def write_config(tmp_path, upstream, policy_path: str) -> str:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"policy: {policy_path}\n"
        f'audit: {{path: "{tmp_path / "audit" / "fetch-{instance}.jsonl"}"}}\n'
        "instance_id: cli-test\n"
        "resolver:\n  hosts:\n    site.example.com: [127.0.0.1]\n"
    )
    return str(config)


async def run_cli(*args: str) -> int:
    import asyncio

    # The command runs its own event loop (asyncio.run), so give it a thread of its own.
    return await asyncio.get_running_loop().run_in_executor(None, main, list(args))


async def test_fetch_prints_the_result_and_audits_to_the_file(
    tmp_path, upstream, write_policy, capsys
) -> None:
    from tests.conftest import loopback_policy

    config = write_config(tmp_path, upstream, write_policy(loopback_policy(upstream.port)))
    status = await run_cli(
        "fetch", f"http://site.example.com:{upstream.port}/page", "--config", config
    )
    captured = capsys.readouterr()
    out = captured.out
    assert status == 0
    where = tmp_path / "audit" / "fetch-cli-test-cli.jsonl"  # the CLI's chain, not a server's
    assert captured.err.splitlines()[-1] == f"gateway fetch: audit records in {where}"
    body = orjson.loads(out)
    assert body["envelope"]["tool"] == "WebFetch" and body["envelope"]["status"] == 200
    audit = where
    records = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
    assert [r["event"]["action"] for r in records if r["event"]["action"] == "WebFetch"] == [
        "WebFetch"
    ]
    assert b'"event"' not in out.encode().split(b"\n", 1)[0]  # stdout holds the result only
    assert all(report.valid for report in verify_files([str(audit)]))


async def test_every_run_appends_to_one_cli_chain(
    tmp_path, upstream, write_policy, capsys
) -> None:
    from gateway.audit.chains import verify_paths
    from gateway.configload.serving import default_instance_id
    from tests.conftest import loopback_policy

    config = tmp_path / "gateway.yaml"
    policy = write_policy(loopback_policy(upstream.port))
    config.write_text(
        f"policy: {policy}\nresolver:\n  hosts:\n    site.example.com: [127.0.0.1]\n"
    )
    url = f"http://site.example.com:{upstream.port}/page"
    for _ in range(3):
        assert await run_cli("fetch", url, "--config", str(config)) == 0
    capsys.readouterr()
    (log,) = (tmp_path / "audit").glob("*.jsonl")
    assert log.name == f"gateway-{default_instance_id()}-cli.jsonl"
    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    actions = [r["event"]["action"] for r in records]
    assert actions == ["log_start", "WebFetch"] * 3
    assert [r["chain"]["seq"] for r in records] == list(range(1, len(records) + 1))
    report = verify_paths([str(tmp_path / "audit")])
    assert report.valid and len(report.chains) == 1, report.describe()


async def test_fetch_refusal_prints_the_error_and_exits_1(
    tmp_path, upstream, write_policy, capsys
) -> None:
    from tests.conftest import loopback_policy

    config = write_config(tmp_path, upstream, write_policy(loopback_policy(upstream.port)))
    status = await run_cli("fetch", "http://169.254.169.254/latest/", "--config", config)
    body = orjson.loads(capsys.readouterr().out)
    assert status == 1
    assert (body["error"]["code"], body["error"]["reason"]) == (
        "policy_denied",
        "ip_literal_not_allowed",
    )


async def test_fetch_with_a_broken_policy_exits_2(tmp_path, write_policy, capsys) -> None:
    status = await run_cli("fetch", "https://example.com/", "--policy", write_policy("mode: yes\n"))
    assert status == 2
    assert "bad_boolean" in capsys.readouterr().err
