"""The audit writer on real files: chain links, restarts, torn tails, rotation, the lock,
checkpoints and key rotation, and failing closed."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from gateway.audit import AuditLog, CheckpointPayload, verify_files
from gateway.errors import AuditWriteError
from gateway.provenance.dsse import CHECKPOINT_PAYLOAD_TYPE, verify_dsse

from .logfiles import (
    FakeClock,
    fetch_record,
    line_sha,
    new_signer,
    open_log,
    read_lines,
    records,
    rotated_files,
)

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def assert_linked(lines: list[bytes], first_seq: int = 1) -> None:
    for index, line in enumerate(lines):
        chain = orjson.loads(line)["chain"]
        assert chain["seq"] == first_seq + index
        if index:
            assert chain["prev"] == line_sha(lines[index - 1])


def test_new_chain_opens_with_log_start_and_links_every_line(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.5)
    log = open_log(tmp_path / "audit" / "gw-{instance}.jsonl", clock=clock)
    written = [log.append(fetch_record(i)) for i in range(3)]
    log.close()

    path = tmp_path / "audit" / "gw-gw-test.jsonl"
    lines = read_lines(path)
    assert len(lines) == 4
    start = orjson.loads(lines[0])
    assert start["event"]["action"] == "log_start"
    assert start["chain"] == {"seq": 1, "prev": None}
    assert start["audit"]["instance_id"] == "gw-test"
    assert_linked(lines)
    assert written[0]["@timestamp"] == "2027-01-15T08:00:00.500Z"
    assert written[-1] == orjson.loads(lines[-1])
    for line in lines:
        record = orjson.loads(line)
        assert TIMESTAMP.fullmatch(record["@timestamp"])
        assert record["observer"] == {"name": "gw-test", "version": "0.0-test"}
    assert log.seq == 4 and log.head == line_sha(lines[-1])


def test_the_log_owns_observer_and_chain_but_keeps_a_given_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl")
    forged = fetch_record(
        1,
        observer={"name": "someone-else"},
        chain={"seq": 99, "prev": "0" * 64},
        **{"@timestamp": "2026-01-02T03:04:05.678Z"},
    )
    written = log.append(forged)
    log.close()
    assert written["observer"]["name"] == "gw-test"
    assert written["chain"]["seq"] == 2
    assert written["@timestamp"] == "2026-01-02T03:04:05.678Z"
    assert forged["chain"]["seq"] == 99  # the caller's dict is not modified


@pytest.mark.parametrize(
    "steps",
    [
        (0.0, 0.001, 0.998, 0.001, 0.0005),  # within a second, then across it
        (0.999, 0.002, 59.0, 3600.0),  # minutes and hours roll over
        (0.0, -1.5, 0.25),  # a clock that steps back
    ],
    ids=["milliseconds", "rollover", "backwards"],
)
def test_timestamps_match_format_timestamp_across_seconds(tmp_path: Path, steps) -> None:
    from gateway.audit.chain import format_timestamp

    clock = FakeClock(1_800_000_059.0)
    log = open_log(tmp_path / "a.jsonl", clock=clock)
    for step in steps:
        clock.now += step
        assert log.append(fetch_record(1))["@timestamp"] == format_timestamp(clock.now)
    log.close()


def test_urls_are_redacted_by_the_writer_too(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl")
    record = fetch_record(
        1,
        url={
            "original": "https://u:pw@example.com/?token=s3cret#frag",
            "full": "https://example.com/?api_key=k",
        },
        redirects=[{"url": "https://example.com/x?sig=abc", "status": 302}, "not-a-hop"],
    )
    log.append(record)
    log.close()
    text = (tmp_path / "a.jsonl").read_text()
    assert "s3cret" not in text and "pw@" not in text and "frag" not in text
    last = records(tmp_path / "a.jsonl")[-1]
    assert last["url"] == {
        "original": "https://example.com/?token=REDACTED",
        "full": "https://example.com/?api_key=REDACTED",
    }
    assert last["redirects"] == [
        {"url": "https://example.com/x?sig=REDACTED", "status": 302},
        "not-a-hop",
    ]
    assert record["url"]["original"].startswith("https://u:pw@")


def test_a_restart_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = open_log(path)
    log.append(fetch_record(1))
    log.close()
    head = line_sha(read_lines(path)[-1])

    log = open_log(path)
    log.append(fetch_record(2))
    log.close()
    lines = read_lines(path)
    restart = orjson.loads(lines[2])
    assert restart["event"]["action"] == "log_start"
    assert restart["chain"] == {"seq": 3, "prev": head}
    assert "torn" not in restart["audit"]
    assert_linked(lines)
    assert [r.valid for r in verify_files([str(path)])] == [True]


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b'{"@timestamp":"2026-', id="half-a-record"),
        pytest.param(b"\xff\xfe garbage", id="binary"),
        pytest.param(
            b'{"event":{"action":"WebFetch"},"chain":{"seq":3,"prev":null}}',
            id="json-without-newline",
        ),
    ],
)
def test_a_torn_last_line_is_ended_and_named_at_restart(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "a.jsonl"
    log = open_log(path)
    log.append(fetch_record(1))
    log.close()
    good = read_lines(path)
    with path.open("ab") as handle:
        handle.write(tail)

    log = open_log(path)
    log.close()
    lines = read_lines(path)
    assert lines[2] == tail  # kept as evidence, ended with a newline
    restart = orjson.loads(lines[3])
    assert restart["chain"] == {"seq": 3, "prev": line_sha(good[-1])}
    assert restart["audit"]["torn"] == [
        {
            "line": 3,
            "offset": len(good[0]) + len(good[1]) + 2,
            "bytes": len(tail),
            "sha256": line_sha(tail),
        }
    ]
    [report] = verify_files([str(path)])
    assert report.valid, report.describe()
    assert any("line 3: torn write" in w for w in report.warnings)


def test_a_file_that_ends_in_foreign_lines_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"not an audit record\n" * 40)
    with pytest.raises(AuditWriteError, match="does not end in audit records"):
        open_log(path)
    assert path.read_bytes() == b"not an audit record\n" * 40


def test_a_second_writer_on_the_same_file_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "gw-{instance}.jsonl"
    first = open_log(path)
    try:
        with pytest.raises(AuditWriteError, match="already being written by another process"):
            open_log(path)
        script = textwrap.dedent(
            """
            import sys
            from gateway.audit import AuditLog
            from gateway.errors import AuditWriteError
            try:
                AuditLog(sys.argv[1], instance_id="gw-test", version="t").open()
            except AuditWriteError as exc:
                print(exc)
                sys.exit(3)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 3, done.stderr
        assert f"pid {os.getpid()}" in done.stdout
    finally:
        first.close()
    second = open_log(path)  # the lock is released by close()
    second.close()
    assert_linked(read_lines(tmp_path / "gw-gw-test.jsonl"))
    assert not list(tmp_path.glob("*.lock"))  # a clean close leaves no lock file behind


def test_the_lock_file_exists_only_while_held(tmp_path: Path) -> None:
    path = tmp_path / "gw.jsonl"
    log = open_log(path)
    lock = tmp_path / "gw.jsonl.lock"
    assert lock.exists()
    log.close()
    assert not lock.exists()
    first, second = open_log(path), None
    try:
        with pytest.raises(AuditWriteError, match="already being written"):
            second = open_log(path)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert not lock.exists()


def test_rotation_starts_each_file_with_log_rotate(tmp_path: Path) -> None:
    signer, public = new_signer()
    log = open_log(tmp_path / "gw-{instance}.jsonl", rotate_bytes=2500, signer=signer)
    for i in range(30):
        log.append(fetch_record(i))
    log.close()
    files = rotated_files(tmp_path)
    assert len(files) >= 3
    all_lines: list[bytes] = []
    for index, name in enumerate(files):
        lines = read_lines(name)
        first = orjson.loads(lines[0])
        if index:
            assert first["event"]["action"] == "log_rotate"
            assert first["audit"]["previous_file"] == os.path.basename(files[index - 1])
            assert first["audit"]["previous_last_line_sha256"] == line_sha(all_lines[-1])
        if index < len(files) - 1:
            # a signing log checkpoints each file as it closes it
            assert orjson.loads(lines[-1])["event"]["action"] == "checkpoint"
            assert re.fullmatch(r"gw-gw-test\.\d{12}\.jsonl", os.path.basename(name))
        all_lines += lines
    assert_linked(all_lines)
    reports = verify_files(files, public_keys=[public])
    assert all(r.valid for r in reports), [r.describe() for r in reports]


def test_a_crash_between_rename_and_new_file_continues_from_the_rotated_file(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "gw-{instance}.jsonl", rotate_bytes=1500)
    for i in range(8):
        log.append(fetch_record(i))
    log.close()
    files = rotated_files(tmp_path)
    current = Path(files[-1])
    current.unlink()  # as if the process died right after renaming the full file aside
    newest = files[-2]

    log = open_log(tmp_path / "gw-{instance}.jsonl", rotate_bytes=1500)
    log.close()
    start = records(current)[0]
    assert start["event"]["action"] == "log_start"
    assert start["audit"]["previous_file"] == os.path.basename(newest)
    assert start["chain"]["prev"] == line_sha(read_lines(newest)[-1])
    reports = verify_files(files)
    assert all(r.valid for r in reports), [r.describe() for r in reports]


def test_checkpoints_are_signed_copied_and_written_when_idle(tmp_path: Path) -> None:
    signer, public = new_signer()
    clock = FakeClock()
    log = open_log(
        tmp_path / "a.jsonl",
        signer=signer,
        checkpoints_path=str(tmp_path / "off-host" / "{instance}-checkpoints.jsonl"),
        checkpoint_interval=300,
        clock=clock,
    )
    log.append(fetch_record(1))
    clock.now += 299
    log.maybe_checkpoint()
    clock.now += 2
    log.maybe_checkpoint()  # no record since: an idle checkpoint still proves silence
    clock.now += 1
    log.maybe_checkpoint()
    log.close()

    lines = read_lines(tmp_path / "a.jsonl")
    actions = [orjson.loads(line)["event"]["action"] for line in lines]
    assert actions == ["log_start", "checkpoint", "WebFetch", "checkpoint", "checkpoint"]
    copies = read_lines(tmp_path / "off-host" / "gw-test-checkpoints.jsonl")
    assert copies == [lines[1], lines[3], lines[4]]

    previous = None
    for index in (1, 3, 4):
        record = orjson.loads(lines[index])
        envelope = record["checkpoint"]["dsse"]
        payload = CheckpointPayload.from_bytes(
            verify_dsse(envelope, [public], CHECKPOINT_PAYLOAD_TYPE)
        )
        assert payload.seq == index and payload.head == line_sha(lines[index - 1])
        assert payload.origin == "gw-test" and payload.file == "a.jsonl"
        assert payload.prev_checkpoint == previous
        previous = line_sha(base64.b64decode(envelope["payload"]))
    [log_report, copy_report] = verify_files(
        [str(tmp_path / "a.jsonl")],
        public_keys=[public],
        checkpoint_files=[str(tmp_path / "off-host" / "gw-test-checkpoints.jsonl")],
    )
    assert log_report.valid and log_report.checkpoints == 3 and log_report.warnings == ()
    assert copy_report.valid and copy_report.kind == "checkpoints"


def test_key_rotation_signs_a_transition_checkpoint_with_both_keys(tmp_path: Path) -> None:
    old, old_public = new_signer()
    new, new_public = new_signer()
    path = tmp_path / "a.jsonl"
    log = open_log(path, signer=old)
    log.append(fetch_record(1))
    transition = log.rotate_key(new)
    log.append(fetch_record(2))
    log.close()

    assert transition["checkpoint"]["keyids"] == [old.keyid, new.keyid]
    envelope = transition["checkpoint"]["dsse"]
    verify_dsse(envelope, [old_public], CHECKPOINT_PAYLOAD_TYPE)
    verify_dsse(envelope, [new_public], CHECKPOINT_PAYLOAD_TYPE)
    final = records(path)[-1]
    assert final["checkpoint"]["keyids"] == [new.keyid]

    [both] = verify_files([str(path)], public_keys=[old_public, new_public])
    assert both.valid, both.describe()
    [old_only] = verify_files([str(path)], public_keys=[old_public])
    assert not old_only.valid and old_only.line == len(read_lines(path))
    assert "signature" in (old_only.reason or "")


def test_status_reports_the_head(tmp_path: Path) -> None:
    signer, _ = new_signer()
    log = open_log(tmp_path / "a.jsonl", signer=signer)
    log.append(fetch_record(1))
    status = log.status()
    log.close()
    assert status["seq"] == 3 and status["head"] == line_sha(read_lines(tmp_path / "a.jsonl")[2])
    assert status["signing"] is True and status["keyid"] == signer.keyid
    assert status["last_checkpoint"]["seq"] == 1
    assert status["healthy"] is True and status["error"] is None


def test_standard_output_starts_a_new_chain_each_time() -> None:
    script = textwrap.dedent(
        """
        from gateway.audit import AuditLog
        for run in range(2):
            log = AuditLog("-", instance_id="gw-test", version="t")
            log.open()
            log.append({"event": {"action": "WebFetch"}})
            log.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    assert [orjson.loads(line)["chain"]["prev"] for line in lines[::2]] == [None, None]
    assert_linked(lines[:2])
    assert_linked(lines[2:])


# -- failing closed ---------------------------------------------------------------------------


def test_a_full_device_refuses_to_open_and_to_append() -> None:
    log = AuditLog("/dev/full", instance_id="gw-test", version="t")
    with pytest.raises(AuditWriteError, match="No space left"):
        log.open()
    with pytest.raises(AuditWriteError, match="not open"):
        log.append(fetch_record(1))


def test_a_path_under_a_regular_file_fails_closed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AuditWriteError, match="cannot open audit log"):
        open_log(tmp_path / "file" / "a.jsonl")


def test_a_directory_that_disappears_refuses_the_next_record(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    log = open_log(directory / "a.jsonl", rotate_bytes=600)
    log.append(fetch_record(1))
    os.rename(directory, tmp_path / "moved")
    try:
        with pytest.raises(AuditWriteError, match="cannot rotate"):
            log.append(fetch_record(2))
        assert log.seq == 2  # nothing was recorded for the refused request
    finally:
        log.close()
    assert [r.valid for r in verify_files([str(tmp_path / "moved" / "a.jsonl")])] == [True]


def test_a_full_disk_refuses_records_and_leaves_no_torn_line(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes writes past a size fail (EFBIG) like a full disk; in a child process
    # so the limit cannot touch the test runner.
    script = textwrap.dedent(
        """
        import resource, signal, sys, os
        from gateway.audit import AuditLog
        from gateway.errors import AuditWriteError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        log = AuditLog(sys.argv[1], instance_id="gw-test", version="t")
        log.open()
        size = os.path.getsize(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 700, resource.RLIM_INFINITY))
        failed = None
        for i in range(20):
            try:
                log.append({"event": {"action": "WebFetch"}, "pad": "x" * 150})
            except AuditWriteError as exc:
                failed = (i, str(exc))
                break
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        log.append({"event": {"action": "WebFetch"}, "after": True})
        log.close()
        print(failed[0], failed[1])
        """
    )
    path = tmp_path / "a.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    failed_at, message = done.stdout.split(" ", 1)
    assert 0 < int(failed_at) < 20 and "cannot write audit log" in message
    lines = read_lines(path)
    assert_linked(lines)  # the half-written record was cut off again
    assert orjson.loads(lines[-1])["after"] is True
    assert [r.valid for r in verify_files([str(path)])] == [True]


@pytest.mark.parametrize(
    "record, repaired",
    [
        pytest.param({"pad": "x" * (1024 * 1024)}, ["pad"], id="too-large"),
        pytest.param({"value": object()}, ["value"], id="not-serialisable"),
        pytest.param({1: "non-string key"}, [".<key>"], id="non-string-key"),
        pytest.param({"n": 2**70}, ["n"], id="integer-past-64-bits"),
        pytest.param(
            {"http": {"response": {"mime_type": "text/\udcffhtml"}}},
            ["http.response.mime_type"],
            id="lone-surrogate",
        ),
        pytest.param({"list": ["a"] * 5000, "s": "\ud800"}, ["s", "list"], id="long-list"),
    ],
)
def test_records_that_would_not_serialise_are_written_repaired(
    tmp_path: Path, record: dict[object, object], repaired: list[str]
) -> None:
    """What a caller missed does not erase the record: it is written, escaped and capped,
    naming the fields that changed, and the log stays healthy."""
    log = open_log(tmp_path / "a.jsonl")
    written = log.append(record)  # type: ignore[arg-type]
    assert log.status()["healthy"] is True
    log.append(fetch_record(2))
    log.close()
    lines = read_lines(tmp_path / "a.jsonl")
    assert_linked(lines)
    on_disk = orjson.loads(lines[1])
    assert on_disk == written and sorted(on_disk["repaired"]) == sorted(repaired)
    assert len(lines[1]) <= 1024 * 1024
    assert [r.valid for r in verify_files([str(tmp_path / "a.jsonl")])] == [True]


def test_a_record_that_cannot_be_written_even_repaired_fails_readiness_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path / "a.jsonl")
    before = read_lines(tmp_path / "a.jsonl")
    # Ten thousand keys of 200 characters: over a line's limit whatever strings are cut to.
    huge = {f"{i:05d}" + "k" * 200: i for i in range(10_000)}
    with (
        caplog.at_level("ERROR", logger="gateway.audit.log"),
        pytest.raises(AuditWriteError, match="cannot be serialised"),
    ):
        log.append(huge)
    status = log.status()
    assert status["healthy"] is False and "cannot be serialised" in status["error"]
    assert [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    log.append(fetch_record(2))  # the next record that can be written heals it
    assert log.status() == {**log.status(), "healthy": True, "error": None}
    log.close()
    lines = read_lines(tmp_path / "a.jsonl")
    assert lines[: len(before)] == before and len(lines) == len(before) + 1
    assert_linked(lines)


def test_writing_before_open_or_after_close_is_refused(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.jsonl"), instance_id="gw-test", version="t")
    with pytest.raises(AuditWriteError, match="not open"):
        log.append(fetch_record(1))
    log.open()
    log.close()
    with pytest.raises(AuditWriteError, match="not open"):
        log.append(fetch_record(1))
