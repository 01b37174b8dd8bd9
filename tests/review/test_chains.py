"""Each chain's verification, with the gateway's keys, redone only when its files change."""

from __future__ import annotations

from pathlib import Path

from gateway.provenance.dsse import Signer
from gateway.review.chains import ChainChecker
from gateway.review.files import AuditFolder
from tests.audit.logfiles import fetch_record, open_log
from tests.review.seed import write_folder


def test_valid_tampered_and_unsigned_chains(tmp_path: Path) -> None:
    seeded = write_folder(tmp_path / "audit")
    key = Signer.from_pem_file(seeded["signing_key"]).public_key
    states = {
        s.instance: s
        for s in ChainChecker(AuditFolder(seeded["template"]), public_keys=[key]).states()
    }
    assert (
        states["gw-a"].valid
        and states["gw-a"].checkpoints > 3
        and states["gw-a"].signatures_checked
    )
    bad = states["gw-c"].reports[0]
    assert not bad.valid and bad.line == 3 and "altered" in (bad.reason or "")
    assert bad.path == "gateway-gw-c.jsonl"
    assert not states["gw-b"].valid  # a key was given, but no checkpoint covers it
    assert states["gw-b"].unsigned and not states["gw-c"].unsigned  # unsigned, not tampered
    unkeyed = {s.instance: s for s in ChainChecker(AuditFolder(seeded["template"])).states()}
    assert unkeyed["gw-b"].valid and not unkeyed["gw-b"].signatures_checked


def test_a_chain_is_verified_again_once_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "g-{instance}.jsonl"
    log = open_log(path)
    log.append(fetch_record(1))
    checker = ChainChecker(AuditFolder(str(path)))
    first = checker.states()[0]
    assert checker.states()[0] is first  # unchanged: the cached result
    log.append(fetch_record(2))
    log.close()
    again = checker.states()[0]
    assert again is not first and again.reports[0].records == 3


def test_checkpoint_copies_are_checked_with_their_chain(tmp_path: Path) -> None:
    from tests.audit.logfiles import new_signer

    signer, public = new_signer()
    path = tmp_path / "g-{instance}.jsonl"
    copies = tmp_path / "cp-{instance}.jsonl"
    log = open_log(path, signer=signer, checkpoints_path=str(copies))
    log.append(fetch_record(1))
    log.close()
    [state] = ChainChecker(
        AuditFolder(str(path), str(copies)), public_keys=[public], checkpoints_template=str(copies)
    ).states()
    assert [r.kind for r in state.reports] == ["log", "checkpoints"]
    assert state.valid and state.reports[1].path == "cp-gw-test.jsonl"
