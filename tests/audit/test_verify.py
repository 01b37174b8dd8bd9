"""`verify_files` against real logs tampered with the ways an attacker (or a crash) would:
each case names the first bad line the verifier must report."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.audit import verify_files
from gateway.provenance.dsse import CHECKPOINT_PAYLOAD_TYPE, sign_many

from .logfiles import (
    edit,
    fetch_record,
    line_sha,
    new_signer,
    open_log,
    read_lines,
    rechain,
    rotated_files,
    write_lines,
)


@dataclass
class SignedLog:
    path: Path
    checkpoints: Path
    public: Any

    @property
    def lines(self) -> list[bytes]:
        return read_lines(self.path)


@pytest.fixture
def signed_log(tmp_path: Path) -> SignedLog:
    """16 lines: 1 log_start, 2 checkpoint, 3-10 records, 11 checkpoint, 12-15 records,
    16 the final checkpoint written at close."""
    signer, public = new_signer()
    path = tmp_path / "gw.jsonl"
    checkpoints = tmp_path / "checkpoints.jsonl"
    log = open_log(path, signer=signer, checkpoints_path=str(checkpoints))
    for i in range(8):
        log.append(fetch_record(i))
    log.checkpoint()
    for i in range(8, 12):
        log.append(fetch_record(i))
    log.close()
    assert len(read_lines(path)) == 16
    return SignedLog(path, checkpoints, public)


def set_url(record: dict[str, Any]) -> None:
    record["url"]["full"] = "https://innocent.example/"


def forged_record(after: bytes) -> bytes:
    """A record that links correctly to `after`, as an attacker would insert it."""
    chain = orjson.loads(after)["chain"]
    record = fetch_record(99)
    record["chain"] = {"seq": chain["seq"] + 1, "prev": line_sha(after)}
    return orjson.dumps(record)


def renumber(lines: list[bytes], start: int) -> list[bytes]:
    """Rewrite seq and prev from `start` (0-based) on: a full rewrite without the key."""
    out = list(lines)
    for index in range(start, len(out)):
        previous = orjson.loads(out[index - 1])["chain"]["seq"]

        def change(record: dict[str, Any], seq: int = previous + 1) -> None:
            record["chain"]["seq"] = seq

        out[index] = edit(out[index], change)
    return rechain(out, start - 1)


def resign_checkpoint(line: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The checkpoint's payload changed and signed again, by a key that is not the gateway's."""
    attacker, _ = new_signer()
    record = orjson.loads(line)
    payload = orjson.loads(base64.b64decode(record["checkpoint"]["dsse"]["payload"]))
    change(payload)
    record["checkpoint"]["dsse"] = sign_many(
        [attacker], orjson.dumps(payload, option=orjson.OPT_SORT_KEYS), CHECKPOINT_PAYLOAD_TYPE
    )
    return orjson.dumps(record)


def replace(lines: list[bytes], index: int, line: bytes) -> list[bytes]:
    return [*lines[:index], line, *lines[index + 1 :]]


Tamper = Callable[[list[bytes]], list[bytes]]

# (tamper, expected bad line or None for valid, words the reason or a warning must contain)
TAMPERING: list[Any] = [
    pytest.param(lambda ls: ls, None, "", id="untouched"),
    pytest.param(lambda ls: replace(ls, 4, edit(ls[4], set_url)), 5, "altered", id="edited-line"),
    pytest.param(
        lambda ls: replace(ls, 14, edit(ls[14], set_url)), 15, "altered", id="edited-last-record"
    ),
    pytest.param(
        lambda ls: replace(ls, 0, edit(ls[0], lambda r: r["audit"].update(instance_id="x"))),
        1,
        "altered",
        id="edited-first-line",
    ),
    pytest.param(lambda ls: ls[:4] + ls[5:], 5, "seq jumps from 4 to 6", id="deleted-line"),
    pytest.param(lambda ls: ls[:4] + ls[7:], 5, "3 record(s)", id="deleted-lines"),
    pytest.param(lambda ls: [*ls[:4], ls[5], ls[4], *ls[6:]], 5, "seq jumps", id="reordered"),
    pytest.param(
        lambda ls: [*ls[:4], forged_record(ls[3]), *ls[4:]], 5, "inserted", id="inserted-forged"
    ),
    pytest.param(
        lambda ls: [*ls[:4], b"{not json", *ls[4:]], 5, "not valid JSON", id="inserted-garbage"
    ),
    pytest.param(
        lambda ls: [*ls[:4], b'{"event": {"action": "WebFetch"}}', *ls[4:]],
        5,
        "not a chained audit record",
        id="inserted-unchained",
    ),
    pytest.param(lambda ls: [*ls[:5], ls[4], *ls[5:]], 6, "repeats", id="duplicated"),
    pytest.param(lambda ls: ls[1:], 1, "does not start a chain", id="first-line-deleted"),
    pytest.param(
        lambda ls: rechain(replace(ls, 4, edit(ls[4], set_url)), 4),
        11,
        "vouches for seq 10",
        id="edited-and-rechained",
    ),
    pytest.param(
        lambda ls: rechain(replace(ls, 12, edit(ls[12], set_url)), 12),
        16,
        "vouches for seq 15",
        id="edited-after-a-checkpoint-and-rechained",
    ),
    pytest.param(
        lambda ls: renumber(ls[:10] + ls[11:], 10),
        15,
        "vouches for seq 15",
        id="checkpoint-removed-and-renumbered",
    ),
    pytest.param(
        lambda ls: replace(ls, 10, resign_checkpoint(ls[10], lambda p: None)),
        11,
        "signature does not verify",
        id="checkpoint-signed-by-another-key",
    ),
    pytest.param(
        lambda ls: replace(ls, 10, resign_checkpoint(ls[10], lambda p: p.update(seq=9))),
        11,
        "signature does not verify",
        id="checkpoint-payload-forged",
    ),
    pytest.param(
        lambda ls: ls[:15],
        None,
        "4 record(s) after the last signed checkpoint",
        id="final-checkpoint-cut",
    ),
    pytest.param(
        lambda ls: ls[:13], None, "2 record(s) after the last signed checkpoint", id="tail-cut"
    ),
    pytest.param(lambda ls: ls[:10], None, "", id="cut-at-a-checkpoint-boundary"),
]


@pytest.mark.parametrize("tamper, bad_line, words", TAMPERING)
def test_tampering_is_reported_at_the_first_bad_line(
    signed_log: SignedLog, tamper: Tamper, bad_line: int | None, words: str
) -> None:
    write_lines(signed_log.path, tamper(signed_log.lines))
    [report] = verify_files([str(signed_log.path)], public_keys=[signed_log.public])
    if bad_line is None:
        assert report.valid, report.describe()
        assert words in " ".join(report.warnings)
    else:
        assert (report.valid, report.line) == (False, bad_line), report.describe()
        assert words in (report.reason or "")
        assert report.describe().endswith(f"(line {bad_line})")


def test_a_cut_tail_is_caught_by_the_checkpoints_kept_elsewhere(signed_log: SignedLog) -> None:
    write_lines(signed_log.path, signed_log.lines[:13])
    [log, copies] = verify_files(
        [str(signed_log.path)],
        public_keys=[signed_log.public],
        checkpoint_files=[str(signed_log.checkpoints)],
    )
    assert copies.valid and copies.checkpoints == 3
    assert not log.valid and log.line == 13
    assert "ends at seq 13" in (log.reason or "") and "covers seq 15" in (log.reason or "")


def test_a_rewritten_log_is_caught_by_the_checkpoints_kept_elsewhere(signed_log: SignedLog) -> None:
    lines = signed_log.lines
    # edit line 13, rechain and drop the final checkpoint: consistent, but not what was signed
    forged = rechain(replace(lines, 12, edit(lines[12], set_url)), 12)[:15]
    write_lines(signed_log.path, forged)
    [log, _] = verify_files(
        [str(signed_log.path)],
        public_keys=[signed_log.public],
        checkpoint_files=[str(signed_log.checkpoints)],
    )
    assert (log.valid, log.line) == (False, 15)
    assert "does not match the checkpoint" in (log.reason or "")


@pytest.mark.parametrize(
    "tamper, words",
    [
        pytest.param(lambda ls: [ls[0], ls[2]], "does not follow the previous", id="removed"),
        pytest.param(
            lambda ls: replace(ls, 1, resign_checkpoint(ls[1], lambda p: None)),
            "signature does not verify",
            id="forged",
        ),
        pytest.param(lambda ls: [*ls, b"garbage"], "not a checkpoint record", id="garbage"),
    ],
)
def test_a_tampered_checkpoints_file_is_invalid(
    signed_log: SignedLog, tamper: Tamper, words: str
) -> None:
    write_lines(signed_log.checkpoints, tamper(read_lines(signed_log.checkpoints)))
    reports = verify_files(
        [str(signed_log.path)],
        public_keys=[signed_log.public],
        checkpoint_files=[str(signed_log.checkpoints)],
    )
    assert reports[0].valid
    assert not reports[1].valid and words in (reports[1].reason or "")


def test_a_wrong_key_fails_at_the_first_checkpoint(signed_log: SignedLog) -> None:
    _, other = new_signer()
    [report] = verify_files([str(signed_log.path)], public_keys=[other])
    assert (report.valid, report.line) == (False, 2)
    assert "no valid signature by any given key" in (report.reason or "")


def test_without_a_key_checkpoints_are_only_checked_for_consistency(signed_log: SignedLog) -> None:
    [report] = verify_files([str(signed_log.path)])
    assert report.valid and report.checkpoints == 3
    assert any("not checked (pass --key)" in w for w in report.warnings)
    lines = signed_log.lines
    write_lines(signed_log.path, rechain(replace(lines, 4, edit(lines[4], set_url)), 4))
    [report] = verify_files([str(signed_log.path)])
    assert (report.valid, report.line) == (False, 11)


def test_a_key_with_no_checkpoint_at_all_is_unsigned_not_invalid(tmp_path: Path) -> None:
    """A chain written before signing was turned on: intact, but no key vouches for it."""
    log = open_log(tmp_path / "a.jsonl")
    log.append(fetch_record(1))
    log.close()
    _, public = new_signer()
    [report] = verify_files([str(tmp_path / "a.jsonl")], public_keys=[public])
    assert report.valid and report.unsigned and report.reason is None
    assert report.describe().startswith("UNSIGNED: ") and "INVALID" not in report.describe()
    [unsigned] = verify_files([str(tmp_path / "a.jsonl")])  # no key: valid, with a warning
    assert unsigned.valid and not unsigned.unsigned
    assert any("no signed checkpoints" in w for w in unsigned.warnings)


def test_checkpoints_signed_by_another_key_stay_invalid(tmp_path: Path) -> None:
    signer, _ = new_signer()
    log = open_log(tmp_path / "a.jsonl", signer=signer)
    log.append(fetch_record(1))
    log.close()
    _, other = new_signer()
    [report] = verify_files([str(tmp_path / "a.jsonl")], public_keys=[other])
    assert not report.valid and not report.unsigned


def test_a_torn_last_line_is_a_warning_not_tampering(signed_log: SignedLog) -> None:
    with signed_log.path.open("ab") as handle:
        handle.write(b'{"@timestamp":"2026-11')
    [report] = verify_files([str(signed_log.path)], public_keys=[signed_log.public])
    assert report.valid
    assert any(w.startswith("line 17: torn write") for w in report.warnings)


@pytest.fixture
def rotated(tmp_path: Path) -> list[str]:
    log = open_log(tmp_path / "gw-{instance}.jsonl", rotate_bytes=1800)
    for i in range(14):
        log.append(fetch_record(i))
    log.close()
    files = rotated_files(tmp_path)
    assert len(files) >= 3
    return files


def test_rotated_files_verify_as_one_chain(rotated: list[str]) -> None:
    reports = verify_files(rotated)
    assert [r.valid for r in reports] == [True] * len(rotated)
    for before, after in zip(reports, reports[1:], strict=False):
        assert after.first_seq == (before.last_seq or 0) + 1


def test_rotated_files_out_of_order_are_invalid(rotated: list[str]) -> None:
    reports = verify_files([rotated[1], rotated[0], *rotated[2:]])
    assert reports[0].valid
    assert (reports[1].valid, reports[1].line) == (False, 1)
    assert "starts a new chain" in (reports[1].reason or "")


def test_a_missing_rotated_file_is_invalid(rotated: list[str]) -> None:
    reports = verify_files([rotated[0], *rotated[2:]])
    assert reports[0].valid
    assert (reports[1].valid, reports[1].line) == (False, 1)
    assert "seq jumps" in (reports[1].reason or "")


def test_a_later_file_alone_continues_a_chain_not_given(rotated: list[str]) -> None:
    [report] = verify_files([rotated[-1]])
    assert report.valid
    assert any("continues a chain from a file not given" in w for w in report.warnings)


def test_an_edit_to_the_last_line_of_a_rotated_file_is_reported_there(rotated: list[str]) -> None:
    lines = read_lines(rotated[0])
    write_lines(rotated[0], replace(lines, len(lines) - 1, edit(lines[-1], set_url)))
    reports = verify_files(rotated)
    assert (reports[0].valid, reports[0].line) == (False, len(lines))
    assert "altered" in (reports[0].reason or "")
    assert all(r.valid for r in reports[1:])


@pytest.mark.parametrize(
    "content, line, words",
    [
        pytest.param(
            b"x" * (2 * 1024 * 1024) + b"\n", 1, "longer than the record limit", id="huge-line"
        ),
        pytest.param(b"\x00\xff\x1b[2J\n", 1, "not valid JSON", id="binary"),
        pytest.param(b"[1, 2]\n", 1, "not a chained audit record", id="json-array"),
        pytest.param(
            b'{"chain": {"seq": true, "prev": null}}\n', 1, "not a chained", id="boolean-seq"
        ),
        pytest.param(
            b'{"chain": {"seq": 1, "prev": "abc"}}\n', 1, "not a chained", id="short-prev"
        ),
        pytest.param(
            b'{"event": {"action": "WebFetch"}, "chain": {"seq": 1, "prev": null}}\n',
            1,
            "not a log_start",
            id="chain-not-opened-by-log-start",
        ),
    ],
)
def test_hostile_files_are_invalid_not_crashes(
    tmp_path: Path, content: bytes, line: int, words: str
) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(content)
    [report] = verify_files([str(path)])
    assert (report.valid, report.line) == (False, line), report.describe()
    assert words in (report.reason or "")


def test_an_empty_or_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    [empty, missing] = verify_files(
        [str(tmp_path / "empty.jsonl"), str(tmp_path / "missing.jsonl")]
    )
    assert empty.valid and "no records in this file" in empty.warnings
    assert not missing.valid and "cannot read the file" in (missing.reason or "")
