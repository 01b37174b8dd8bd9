"""`audit tail`: backlog and filters, following a file while the real writer appends and
rotates it, and terminal-safe formatting of attacker-controlled fields."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway.audit.tail import format_record, record_filter, tail_records
from gateway.audit.terminal import printable

from .logfiles import fetch_record, open_log
from .test_summary import denial

WAIT = 10.0  # generous bound for a background thread to see a line; never a timing assertion


def test_backlog_is_the_last_matching_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl")
    for i in range(5):
        log.append(fetch_record(i))
    log.append(denial(5, "coder", "paste.example", "default", "domain_not_allowed"))
    log.append(denial(6, "research-agent", "x.example", "default", "domain_not_allowed"))
    log.close()
    path = str(tmp_path / "a.jsonl")

    last_two = list(tail_records(path, backlog=2))
    assert [r["event"]["id"] for r in last_two] == ["d5", "d6"]
    denials = list(tail_records(path, backlog=10, matches=record_filter(disposition="deny")))
    assert [r["event"]["id"] for r in denials] == ["d5", "d6"]
    coder = list(tail_records(path, matches=record_filter(client="coder")))
    assert [r["event"]["id"] for r in coder] == ["d5"]
    everything = list(tail_records(path, backlog=100))
    assert everything[0]["event"]["action"] == "log_start" and len(everything) == 8


def test_a_missing_file_without_follow_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(tail_records(str(tmp_path / "missing.jsonl")))


class Follower:
    """Runs tail_records(follow=True) in a thread and hands over what it yields."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        self.seen: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(path, kwargs), daemon=True)
        self.thread.start()

    def _run(self, path: str, kwargs: dict[str, Any]) -> None:
        for record in tail_records(
            path, follow=True, poll_interval=0.02, stop=self.stopped.is_set, **kwargs
        ):
            self.seen.put(record)

    def next_id(self) -> str:
        record = self.seen.get(timeout=WAIT)
        return str(record.get("event", {}).get("id") or record["event"]["action"])

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


def test_follow_sees_new_records_across_rotations(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl", rotate_bytes=1200)
    log.append(fetch_record(0))
    follower = Follower(str(tmp_path / "a.jsonl"), backlog=1)
    seen: list[str] = []
    try:
        assert follower.next_id() == "ev-0"
        for i in range(1, 12):  # several rotations happen on the way
            log.append(fetch_record(i))
            while f"ev-{i}" not in seen:  # pace the writer: a file per poll at most
                seen.append(follower.next_id())
    finally:
        log.close()
        follower.stop()
    assert [x for x in seen if x.startswith("ev-")] == [f"ev-{i}" for i in range(1, 12)]
    assert seen.count("log_rotate") >= 2
    assert len(list(tmp_path.glob("a.0*.jsonl"))) >= 2


def test_follow_filters_and_waits_for_the_file_to_appear(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    follower = Follower(str(path), matches=record_filter(disposition="deny"))
    try:
        log = open_log(path)
        log.append(fetch_record(1))
        log.append(denial(2, "coder", "paste.example", "default", "domain_not_allowed"))
        assert follower.next_id() == "d2"
        log.append(fetch_record(3))
        log.append(denial(4, "coder", "paste.example", "default", "domain_not_allowed"))
        assert follower.next_id() == "d4"
        log.close()
    finally:
        follower.stop()


def test_a_folder_or_glob_shows_the_newest_chain(tmp_path: Path) -> None:
    old = open_log(tmp_path / "gateway-old.jsonl")
    old.append(fetch_record(1))
    old.close()
    new = open_log(tmp_path / "gateway-new.jsonl")
    new.append(fetch_record(2))
    new.close()
    os.utime(tmp_path / "gateway-old.jsonl", (1_000_000, 1_000_000))  # the older chain
    for path in (str(tmp_path), str(tmp_path / "gateway-*.jsonl")):
        assert [r["event"].get("id") for r in tail_records(path, backlog=1)] == ["ev-2"], path
    with pytest.raises(FileNotFoundError):
        list(tail_records(str(tmp_path / "nothing-*.jsonl")))


def test_following_a_folder_moves_on_to_a_new_chain(tmp_path: Path) -> None:
    first = open_log(tmp_path / "gateway-a.jsonl", rotate_bytes=1200)
    first.append(fetch_record(0))
    follower = Follower(str(tmp_path), backlog=1)
    seen: list[str] = []
    try:
        assert follower.next_id() == "ev-0"
        for i in range(1, 6):  # rotations of the followed chain are followed
            first.append(fetch_record(i))
            while f"ev-{i}" not in seen:
                seen.append(follower.next_id())
        first.close()
        second = open_log(tmp_path / "gateway-b.jsonl")  # a new chain (another instance)
        second.append(fetch_record(100))
        while "ev-100" not in seen:
            seen.append(follower.next_id())
        second.append(fetch_record(101))
        assert follower.next_id() == "ev-101"
        second.close()
    finally:
        follower.stop()
    events = [x for x in seen if x.startswith("ev-")]
    assert events == [f"ev-{i}" for i in range(1, 6)] + ["ev-100"]  # none twice, none lost
    assert "log_rotate" in seen and seen.index("log_start") > seen.index("ev-5")


def test_following_an_empty_folder_waits_for_the_first_chain(tmp_path: Path) -> None:
    follower = Follower(str(tmp_path))
    try:
        log = open_log(tmp_path / "gateway-x.jsonl")
        log.append(fetch_record(7))
        assert follower.next_id() == "log_start"
        assert follower.next_id() == "ev-7"
        log.close()
    finally:
        follower.stop()


def test_follow_holds_a_half_written_line_until_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"")
    follower = Follower(str(path))
    try:
        with path.open("ab") as handle:
            handle.write(b'{"event": {"id": "half')
            handle.flush()
            with pytest.raises(queue.Empty):
                follower.seen.get(timeout=0.3)
            handle.write(b'"}}\n')
        assert follower.next_id() == "half"
    finally:
        follower.stop()


HOSTILE_URL = "https://e.example/\x1b]8;;https://evil\x07click\x1b]8;;\x07\x1b[2J\r\nFAKE\u202e"


def test_format_record_is_one_safe_line() -> None:
    record = denial(1, "coder\x1b[31m", "paste.example\x00", "default", "domain_not_allowed")
    record["url"] = {"full": HOSTILE_URL}
    record["@timestamp"] = "2026-11-30T06:00:00.000Z"
    line = format_record(record)
    assert "\x1b" not in line and "\n" not in line and "\r" not in line and "\u202e" not in line
    assert line.split("  ")[:6] == [
        "2026-11-30T06:00:00.000Z",
        "coder",
        "WebFetch",
        "deny",
        "-",
        "paste.example",
    ]
    assert "clickFAKE" in line.replace(" ", "")


def test_format_record_for_lifecycle_records() -> None:
    record = {
        "@timestamp": "2026-11-30T06:00:00.000Z",
        "event": {"action": "log_rotate"},
        "audit": {"file": "a.jsonl", "previous_file": "a.000000000010.jsonl"},
        "chain": {"seq": 11, "prev": "0" * 64},
    }
    assert format_record(record) == (
        "2026-11-30T06:00:00.000Z  log_rotate  seq=11  file=a.jsonl  "
        "previous_file=a.000000000010.jsonl"
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "-"),
        (42, "42"),
        ("plain", "plain"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b]0;title\x07text", "text"),
        ("\x1b]8;;http://x\x1b\\link", "link"),
        ("\x9b31mC1", "C1"),
        ("a\r\nb\tc", "a b c"),
        ("nul\x00del\x7f", "nuldel"),
        ("bidi\u202eflip\u2066x\u2069", "bidiflipx"),
        ("zero\u200bwidth\ufeff", "zerowidth"),
        ("lone\ud800surrogate", "lonesurrogate"),
        ("x" * 10, "xxxx…"),
    ],
)
def test_printable(value: object, expected: str) -> None:
    assert printable(value, limit=5 if expected == "xxxx…" else 300) == expected
