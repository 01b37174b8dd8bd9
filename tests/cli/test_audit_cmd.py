"""`gateway audit verify | summary | tail` on real log files: output lines and exit codes."""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization

from gateway.cli.audit_cmd import register
from tests.audit.logfiles import (
    edit,
    fetch_record,
    new_signer,
    open_log,
    read_lines,
    rotated_files,
    write_lines,
)
from tests.audit.test_summary import denial

WAIT = 20.0  # bound on waiting for a subprocess line; never a timing assertion


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gateway")
    register(parser.add_subparsers())
    args = parser.parse_args(["audit", *argv])
    return int(args.run(args))


def write_public_key(path: Path, public: object) -> str:
    path.write_bytes(
        public.public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(path)


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, str, Path]:
    signer, public = new_signer()
    path = tmp_path / "gw.jsonl"
    checkpoints = tmp_path / "checkpoints.jsonl"
    log = open_log(path, signer=signer, checkpoints_path=str(checkpoints))
    for i in range(6):
        log.append(fetch_record(i))
    log.append(denial(6, "coder", "paste.example", "default", "domain_not_allowed"))
    log.close()
    return path, write_public_key(tmp_path / "signing.pub", public), checkpoints


def test_verify_valid(signed: tuple[Path, str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, key, checkpoints = signed
    assert run(["verify", str(path), "--key", key, "--checkpoints", str(checkpoints)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: valid",
        "chain gw-test: valid (1 file, 10 records, seq 1-10)",
        f"{checkpoints}: valid",
        "set: valid (1 chain, 1 file, 1 checkpoints file)",
    ]


def test_verify_names_the_edited_line(
    signed: tuple[Path, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, key, _ = signed
    lines = read_lines(path)
    lines[4] = edit(lines[4], lambda r: r["url"].update(full="https://other.example/"))
    write_lines(path, lines)
    assert run(["verify", str(path), "--key", key]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: INVALID: line 5 was altered")
    assert out.splitlines()[0].endswith("(line 5)")
    assert out.splitlines()[-2:] == [
        "chain gw-test: INVALID (1 file, 5 records, seq 1-5)",
        "set: INVALID (1 chain, 1 file; 1 invalid)",
    ]


def test_verify_with_a_wrong_key(
    signed: tuple[Path, str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = signed
    _, other = new_signer()
    assert run(["verify", str(path), "--key", write_public_key(tmp_path / "o.pub", other)]) == 1
    assert "INVALID: checkpoint at line 2: signature does not verify" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, words",
    [
        pytest.param(None, "cannot read", id="missing"),
        pytest.param(b"hello", "not a PEM public key", id="not-pem"),
    ],
)
def test_verify_with_an_unusable_key_file_is_a_usage_error(
    signed: tuple[Path, str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | None,
    words: str,
) -> None:
    key = tmp_path / "bad.pub"
    if content is not None:
        key.write_bytes(content)
    assert run(["verify", str(signed[0]), "--key", str(key)]) == 2
    assert words in capsys.readouterr().err


def test_verify_several_files_of_one_chain_with_warnings_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(tmp_path / "gw-{instance}.jsonl", rotate_bytes=1500)
    for i in range(8):
        log.append(fetch_record(i))
    log.close()
    files = rotated_files(tmp_path)
    assert run(["verify", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if not line.startswith("  ")] == [
        *(f"{f}: valid" for f in files),
        f"chain gw-test: valid ({len(files)} files, 12 records, seq 1-12)",
        f"set: valid (1 chain, {len(files)} files)",
    ]
    assert out[-3] == (
        "  warning: no signed checkpoints: records removed from the end of the log cannot be "
        "detected"
    )
    assert run(["verify", "--json", *reversed(files[1:])]) == 0  # put in chain order
    objects = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    reports = [o for o in objects if o["kind"] == "log"]
    assert [r["path"] for r in reports] == files[1:]
    assert (objects[-2]["kind"], objects[-2]["chain"]) == ("chain", "gw-test")
    assert objects[-2]["files"] == files[1:] and objects[-2]["valid"] is True
    assert objects[-1]["kind"] == "set" and objects[-1]["valid"] is True
    assert "continues a chain from a file not given" in reports[0]["warnings"][0]


def test_summary_json_is_one_object(
    signed: tuple[Path, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["summary", str(signed[0]), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = orjson.loads(out)
    assert result["totals"] == {"allow": 6, "deny": 1, "would_deny": 0, "error": 0}
    assert result["top_denied_domains"][0]["domain"] == "paste.example"
    assert run(["summary", str(signed[0]), "--json", "--client", "coder"]) == 0
    assert orjson.loads(capsys.readouterr().out)["records"] == 1


def test_summary_text_is_terminal_safe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = open_log(tmp_path / "a.jsonl")
    log.append(denial(1, "coder\x1b[2J", "evil\x1b]0;pwned\x07.example", "default", "x\r\ny"))
    log.close()
    assert run(["summary", str(tmp_path / "a.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    for heading in (
        "Decisions (1: one per tool call, proxied request or tunnel)",
        "Not decisions (counted apart)",
        "By tool",
        "Top domains refused by the policy",
        "Clients",
        "Policy refusals by reason",
        "Decisions by UTC hour",
        "Injection signals",
    ):
        assert f"\n{heading}" in out
    assert "evil.example" in out and "x y" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        pytest.param(["--since", "yesterday"], "--since 'yesterday'", id="bad-since"),
        pytest.param(["MISSING"], "cannot read", id="missing-file"),
    ],
)
def test_summary_usage_errors(
    signed: tuple[Path, str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    words: str,
) -> None:
    files = [str(tmp_path / "missing.jsonl")] if "MISSING" in argv else [str(signed[0])]
    argv = [a for a in argv if a != "MISSING"]
    assert run(["summary", *files, *argv]) == 2
    assert words in capsys.readouterr().err


def test_tail_prints_the_last_matching_records(
    signed: tuple[Path, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(signed[0])
    assert run(["tail", path, "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "  deny  " in lines[0] and "checkpoint" in lines[1]
    assert run(["tail", path, "--decision", "deny"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert "coder  WebFetch  deny  -  paste.example" in line
    assert run(["tail", path, "--client", "nobody"]) == 0
    assert capsys.readouterr().out == ""
    assert run(["tail", path + ".missing"]) == 2


def test_tail_follow_through_the_real_command(tmp_path: Path) -> None:
    path = tmp_path / "gw.jsonl"
    log = open_log(path, rotate_bytes=1500)
    log.append(fetch_record(0))
    command = [sys.executable, "-m", "gateway", "audit", "tail", "-f", str(path), "-n", "1",
               "--client", "research-agent"]  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        stdout = process.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True)
        reader.start()
        try:
            assert "/page/0" in lines.get(timeout=WAIT)
            for i in range(1, 7):  # rotates on the way
                log.append(fetch_record(i))
                assert f"/page/{i}" in lines.get(timeout=WAIT)
                log.append(
                    denial(100 + i, "coder", "paste.example", "default", "domain_not_allowed")
                )
        finally:
            log.close()
            process.terminate()
            process.wait(WAIT)
            reader.join(WAIT)
    assert len(list(tmp_path.glob("gw.0*.jsonl"))) >= 2
    assert lines.empty()  # the other client's records were filtered out


def test_tail_of_a_folder_shows_its_newest_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = open_log(tmp_path / "gateway-a.jsonl", instance_id="a")
    older.append(fetch_record(1))
    older.close()
    newer = open_log(tmp_path / "gateway-b.jsonl", instance_id="b")
    newer.append(fetch_record(2))
    newer.close()
    os.utime(tmp_path / "gateway-a.jsonl", (1_000_000, 1_000_000))
    assert run(["tail", str(tmp_path), "-n", "1"]) == 0
    assert "/page/2" in capsys.readouterr().out
    assert run(["tail", str(tmp_path / "*.jsonl"), "-n", "1"]) == 0
    assert "/page/2" in capsys.readouterr().out
    assert run(["tail", str(tmp_path / "none-*.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_verify_calls_a_chain_from_before_signing_unsigned_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Signing turned on later: the older chain is UNSIGNED (exit 3), not INVALID; the newer
    one valid; the exit code tells a script that not everything is vouched for."""
    before = open_log(tmp_path / "gateway-old.jsonl", instance_id="old")
    before.append(fetch_record(1))
    before.close()
    signer, public = new_signer()
    after = open_log(tmp_path / "gateway-new.jsonl", instance_id="new", signer=signer)
    after.append(fetch_record(2))
    after.close()
    key = write_public_key(tmp_path / "signing.pub", public)
    assert run(["verify", str(tmp_path), "--key", key]) == 3
    out = capsys.readouterr().out
    assert "INVALID" not in out
    assert "chain old: UNSIGNED (1 file" in out and "chain new: valid" in out
    assert "set: valid but UNSIGNED (2 chains, 2 files; 1 unsigned)" in out
    assert run(["verify", str(tmp_path / "gateway-new.jsonl"), "--key", key]) == 0
    capsys.readouterr()
    assert run(["verify", "--json", str(tmp_path), "--key", key]) == 3
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["unsigned"] for r in rows if r["kind"] == "chain"] == [False, True]
    assert rows[-1] == {**rows[-1], "kind": "set", "valid": True, "unsigned": 1}
