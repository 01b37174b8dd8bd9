"""tools.authfailures: failed credentials recorded and throttled per source address, on a
real audit log with a clock the test moves."""

from __future__ import annotations

from pathlib import Path

from gateway.audit.verify import verify_files
from gateway.tools.authfailures import AuthFailureRecorder
from tests.audit.logfiles import FakeClock, open_log, records


def fail(recorder: AuthFailureRecorder, ip: str = "127.0.0.9", hint: str | None = None):
    return recorder.failed(
        transport="api",
        message="unknown token",
        client_hint=hint,
        source=(ip, 40000),
        request_id="r",
    )


def failures(path: Path) -> list[dict]:
    return [r for r in records(path) if r["event"]["action"] == "auth_failure"]


def test_the_first_failure_is_recorded_at_once_the_rest_as_one_count(tmp_path: Path) -> None:
    clock, wall = FakeClock(100.0), FakeClock(1_800_000_000.0)
    log = open_log(tmp_path / "a.jsonl")
    recorder = AuthFailureRecorder(log, window=60, budget=20, clock=clock, wall_clock=wall)
    waits = [fail(recorder) for _ in range(300)]
    assert waits[:20] == [None] * 20
    assert all(w is not None and 0 < w <= 60 for w in waits[20:])
    (first,) = failures(tmp_path / "a.jsonl")  # the window's count is not due yet
    assert first["event"].get("count") is None
    assert first["source"] == {"ip": "127.0.0.9", "port": 40000}
    recorder.flush()
    assert len(failures(tmp_path / "a.jsonl")) == 1  # the window has not ended
    clock.now += 60
    wall.now += 60
    recorder.flush()
    first, summed = failures(tmp_path / "a.jsonl")
    assert summed["event"]["count"] == 299
    assert summed["event"]["start"] == "2027-01-15T08:00:00.000Z"
    assert summed["event"]["reason"] == "unknown token"
    # A new window: recorded at once again, and no longer throttled.
    assert fail(recorder) is None
    assert len(failures(tmp_path / "a.jsonl")) == 3
    log.close()
    assert [r.valid for r in verify_files([str(tmp_path / "a.jsonl")])] == [True]


def test_addresses_and_claimed_clients_have_windows_of_their_own(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl")
    recorder = AuthFailureRecorder(log, budget=2, clock=FakeClock(0.0))
    for _ in range(5):
        fail(recorder, "127.0.0.1")
    assert fail(recorder, "127.0.0.2") is None  # another address is not throttled
    assert fail(recorder, "127.0.0.1", hint="agent") is None
    assert len(failures(tmp_path / "a.jsonl")) == 3
    recorder.flush(everything=True)  # at shutdown: every pending count
    counts = [r["event"].get("count") for r in failures(tmp_path / "a.jsonl")]
    assert counts == [None, None, None, 4]
    log.close()


def test_a_window_ending_is_written_by_the_next_failure_too(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    log = open_log(tmp_path / "a.jsonl")
    recorder = AuthFailureRecorder(log, window=10, clock=clock)
    fail(recorder)
    fail(recorder)
    clock.now += 11
    fail(recorder)
    assert [r["event"].get("count") for r in failures(tmp_path / "a.jsonl")] == [None, 1, None]
    log.close()
