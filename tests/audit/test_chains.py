"""`audit verify` over sets: several processes' chains in one folder, rotated files in any
order, globs, checkpoint copies found among the files, and one result per chain and set."""

from __future__ import annotations

from pathlib import Path

from gateway.audit.chains import expand_paths, group_chains, verify_paths
from tests.audit import logfiles


def write_chain(directory: Path, instance: str, records: int, **kwargs) -> None:
    log = logfiles.open_log(directory / "gateway-{instance}.jsonl", instance_id=instance, **kwargs)
    for i in range(records):
        log.append(logfiles.fetch_record(i))
    log.close()


def test_a_restart_makes_a_second_chain_and_the_folder_verifies(tmp_path: Path) -> None:
    # The case: each start writes its own chain file; after a restart the set of
    # files must verify, each chain on its own.
    write_chain(tmp_path, "host-101", 41)
    write_chain(tmp_path, "host-202", 3)
    for paths in (
        [str(tmp_path)],
        [str(tmp_path / "*.jsonl")],
        sorted(map(str, tmp_path.glob("*.jsonl"))),
    ):
        result = verify_paths(paths)
        assert result.valid, result
        assert [chain.name for chain in result.chains] == ["host-101", "host-202"]
        assert [chain.records for chain in result.chains] == [42, 4]
        assert result.describe() == "valid (2 chains, 2 files)"
    assert not list(tmp_path.glob("*.lock"))


def test_rotated_files_are_put_in_chain_order(tmp_path: Path) -> None:
    write_chain(tmp_path, "gw-test", 12, rotate_bytes=1500)
    files = logfiles.rotated_files(tmp_path, stem="gateway-gw-test")
    assert len(files) >= 3
    chains, checkpoints = group_chains(list(reversed(files)))
    assert chains == [("gw-test", files)] and checkpoints == []
    assert verify_paths(list(reversed(files))).valid


def test_one_tampered_chain_fails_alone(tmp_path: Path) -> None:
    write_chain(tmp_path, "a", 5)
    write_chain(tmp_path, "b", 5)
    path = tmp_path / "gateway-b.jsonl"
    lines = logfiles.read_lines(path)
    lines[3] = logfiles.edit(lines[3], lambda r: r["url"].update(full="https://other.example/"))
    logfiles.write_lines(path, lines)
    result = verify_paths([str(tmp_path)])
    assert [chain.valid for chain in result.chains] == [True, False]
    assert result.chains[1].files[0].line == 4
    assert not result.valid and result.describe().endswith("; 1 invalid)")


def test_a_file_moved_aside_and_a_new_chain_of_the_same_instance(tmp_path: Path) -> None:
    write_chain(tmp_path, "fixed", 3)
    (tmp_path / "gateway-fixed.jsonl").rename(tmp_path / "old-fixed.jsonl")
    write_chain(tmp_path, "fixed", 2)  # a brand-new chain: log_start with prev null
    result = verify_paths([str(tmp_path)])
    assert [chain.name for chain in result.chains] == ["fixed #1", "fixed #2"]
    assert result.valid


def test_checkpoint_copies_in_the_folder_are_checked_as_such(tmp_path: Path) -> None:
    signer, public = logfiles.new_signer()
    copies = tmp_path / "checkpoints-{instance}.jsonl"
    write_chain(tmp_path, "signed", 4, signer=signer, checkpoints_path=str(copies))
    result = verify_paths([str(tmp_path)], public_keys=[public])
    assert [chain.name for chain in result.chains] == ["signed"]
    assert [Path(r.path).name for r in result.checkpoints] == ["checkpoints-signed.jsonl"]
    assert result.valid, result


def test_paths_that_name_nothing(tmp_path: Path) -> None:
    files, unmatched = expand_paths([str(tmp_path / "*.jsonl"), str(tmp_path / "missing.jsonl")])
    assert files == [str(tmp_path / "missing.jsonl")]  # reported unreadable by verify
    assert unmatched == [str(tmp_path / "*.jsonl")]
    result = verify_paths([str(tmp_path / "*.jsonl")])
    assert not result.valid and "no audit log files" in result.describe()
    missing = verify_paths([str(tmp_path / "missing.jsonl")])
    assert not missing.valid
    assert "cannot read" in (missing.chains[0].files[0].reason or "")


def test_summary_reads_a_folder_once_per_record(tmp_path: Path, capsys) -> None:
    import orjson

    from gateway.cli import main

    signer, _ = logfiles.new_signer()
    copies = tmp_path / "checkpoints-{instance}.jsonl"
    write_chain(tmp_path, "one", 3, signer=signer, checkpoints_path=str(copies))
    write_chain(tmp_path, "two", 2)
    assert main(["audit", "summary", str(tmp_path), "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["totals"]["allow"] == 5
    assert main(["audit", "summary", str(tmp_path / "none-*.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
