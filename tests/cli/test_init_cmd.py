"""`gateway init`: the set-up it writes checks clean, its policy tests pass, and `gateway
serve` runs it, admitting the printed token and nothing else."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import orjson

from gateway.cli import main
from tests.processes import STARTUP_TIMEOUT, free_port


def run_init(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["init", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_init_writes_a_set_up_that_checks_and_tests_clean(tmp_path, capsys) -> None:
    target = tmp_path / "gw"
    status, out, _ = run_init(capsys, str(target))
    assert status == 0
    token = re.search(r"token (gwt_\S+)", out).group(1)
    config = (target / "gateway.yaml").read_text()
    assert token not in config  # printed once, stored only as its SHA-256
    assert hashlib.sha256(token.encode()).hexdigest() in config
    assert main(["config", "check", str(target / "gateway.yaml")]) == 0
    checked = capsys.readouterr().out
    assert "ok (1 client, 1 policy)" in checked and "warning" not in checked
    policy, cases = target / "policies" / "agent.yaml", target / "policies" / "agent.tests.yaml"
    assert main(["policy", "test", str(policy), str(cases)]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_init_turns_dlp_on_in_report_mode_and_says_so(tmp_path, capsys) -> None:
    """A secret in a URL leaves a record under the policy init writes (as under every shipped
    policy), and init's output says which mode DLP is in."""
    from gateway.policy.load import load_policy_file
    from gateway.tools.explain import judge

    status, out, _ = run_init(capsys, str(tmp_path))
    assert status == 0
    assert "dlp.mode: report" in out
    policy, _ = load_policy_file(str(tmp_path / "policies" / "agent.yaml"))
    assert str(policy.dlp.mode) == "report"
    verdict = judge(policy, "https://docs.python.org/?q=ghp_" + "a1B2c3D4e5" * 4)
    assert verdict.decision.allowed and not verdict.enforced
    assert (verdict.reason, verdict.rule) == ("sensitive_data", "dlp.github_token")


def test_init_points_at_where_the_keys_are(tmp_path, capsys) -> None:
    assert run_init(capsys, str(tmp_path))[0] == 0
    header = (tmp_path / "gateway.yaml").read_text().split("\nlisten:", 1)[0]
    root = Path(__file__).resolve().parent.parent.parent
    named = re.findall(r"(?:examples|docs)/[\w./-]+\.(?:yaml|md)", header)
    assert "examples/config/gateway.yaml" in named
    assert all((root / name).is_file() for name in named), named
    assert "docs/design.md" not in header  # it lists modules, not configuration keys


def test_init_never_overwrites(tmp_path, capsys) -> None:
    (tmp_path / "gateway.yaml").write_text("# mine\n")
    status, out, err = run_init(capsys, str(tmp_path))
    assert status == 1 and "already exists; nothing written" in err
    assert (tmp_path / "gateway.yaml").read_text() == "# mine\n"
    assert not (tmp_path / "policies").exists()


def test_init_refuses_a_bad_client_id(tmp_path, capsys) -> None:
    status, _, err = run_init(capsys, str(tmp_path), "--client", "no spaces")
    assert status == 2 and "not a client id" in err
    assert not any(tmp_path.iterdir())


async def test_serve_runs_what_init_wrote(tmp_path, capsys) -> None:
    port, proxy_port = free_port(), free_port()
    status = main(["init", str(tmp_path), "--port", str(port), "--proxy-port", str(proxy_port)])
    out = capsys.readouterr().out
    assert status == 0
    token = re.search(r"token (gwt_\S+)", out).group(1)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--config",
        str(tmp_path / "gateway.yaml"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(tmp_path),
    )
    try:
        assert process.stderr is not None
        while True:
            line = await asyncio.wait_for(process.stderr.readline(), STARTUP_TIMEOUT)
            assert line, "gateway exited before listening"
            if orjson.loads(line).get("message") == "listening":
                break
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}/v1/status"
            async with session.get(url) as response:
                assert response.status == 401
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(url, headers=headers) as response:
                assert response.status == 200
                body = await response.json()
        assert "agent" in orjson.dumps(body).decode()
    finally:
        os.kill(process.pid, signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    assert list(Path(tmp_path / "audit").glob("gateway-*.jsonl"))
    assert not list(Path(tmp_path / "audit").glob("*.lock"))
