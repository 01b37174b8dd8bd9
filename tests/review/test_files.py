"""Finding each chain's files in the audit folder from the path template."""

from __future__ import annotations

from pathlib import Path

from gateway.review.files import AuditFolder
from tests.review.seed import write_folder


def test_chains_group_rotated_files_before_the_live_one(tmp_path: Path) -> None:
    seeded = write_folder(tmp_path / "audit")
    chains = AuditFolder(seeded["template"]).chains()
    assert [c.instance for c in chains] == ["gw-a", "gw-b", "gw-c"]
    names = [f.name for f in chains[0].files]
    assert names[-1] == "gateway-gw-a.jsonl"
    assert len(names) > 3 and names[:-1] == sorted(names[:-1])
    assert all(".lock" not in f.name for c in chains for f in c.files)


def test_files_outside_the_template_are_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "audit"
    folder.mkdir()
    for name in (
        "gateway-a.jsonl",
        "gateway-a.202601010000-2.jsonl",
        "gateway-a.202601010000.jsonl",
        "notes.txt",
        "other-a.jsonl",
        "gateway-a.jsonl.lock",
        "checkpoints-a.jsonl",
    ):
        (folder / name).write_bytes(b"")
    (folder / "gateway-dir.jsonl").mkdir()
    audit = AuditFolder(
        str(folder / "gateway-{instance}.jsonl"), str(folder / "checkpoints-{instance}.jsonl")
    )
    [chain] = audit.chains()
    assert chain.instance == "a"
    assert [f.name for f in chain.files] == [
        "gateway-a.202601010000.jsonl",
        "gateway-a.202601010000-2.jsonl",
        "gateway-a.jsonl",
    ]
    assert audit.file("notes.txt") is None
    assert audit.file("../audit/gateway-a.jsonl") is None
    assert audit.file("gateway-a.jsonl") is not None


def test_a_template_without_instance_is_one_chain(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(b"")
    (tmp_path / "audit.202601010000.jsonl").write_bytes(b"")
    [chain] = AuditFolder(str(tmp_path / "audit.jsonl")).chains()
    assert chain.instance == "audit"
    assert [f.name for f in chain.files] == ["audit.202601010000.jsonl", "audit.jsonl"]


def test_stdout_and_a_missing_folder_have_no_chains(tmp_path: Path) -> None:
    assert AuditFolder("-").chains() == []
    assert AuditFolder("-").streamed
    assert AuditFolder(str(tmp_path / "nowhere" / "g-{instance}.jsonl")).chains() == []
