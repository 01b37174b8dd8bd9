"""The policy loader's `dlp:` section: the canaries file (relative to the policy, comments and
blank lines skipped, never echoed in an error) and the compiled settings. The section's other
problems are golden files (golden/dlp_*.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy.dlp import DlpMode
from gateway.policy.load import PolicyValidationError, load_policy_file

CANARY = "tripwire-4c1f7a2b9e"


def write(folder: Path, policy: str) -> Path:
    file = folder / "policy.yaml"
    file.write_text(policy)
    return file


def test_absent_section_is_off_with_every_detector_ready(tmp_path: Path) -> None:
    policy, _ = load_policy_file(write(tmp_path, "name: p\n"))
    assert policy.dlp.mode is DlpMode.OFF and not policy.dlp.active
    assert policy.dlp.untrusted_hosts is DlpMode.OFF
    assert policy.dlp.entropy is not None and policy.dlp.entropy.where == ("host_labels",)


def test_the_section_compiles(tmp_path: Path) -> None:
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "canaries.txt").write_text(f"# tripwires\n\n  {CANARY}  \n")
    policy, issues = load_policy_file(
        write(
            tmp_path,
            "dlp:\n  mode: enforce\n  canaries_file: lists/canaries.txt\n"
            "  detectors: {jwt: false, entropy: false}\n  untrusted_hosts: report\n"
            "  body_prefix_bytes: 1024\n  patterns: [{name: emp, regex: 'EMP-[0-9]{8}'}]\n",
        )
    )
    assert issues == ()
    dlp = policy.dlp
    assert dlp.mode is DlpMode.ENFORCE and dlp.untrusted_hosts is DlpMode.REPORT
    assert dlp.canaries == (CANARY,) and dlp.canaries_file == "lists/canaries.txt"
    assert "jwt" not in dlp.detectors and "aws_access_key" in dlp.detectors
    assert dlp.entropy is None and dlp.body_prefix_bytes == 1024
    assert [p.name for p in dlp.patterns] == ["emp"]


def test_a_short_canary_is_refused_without_being_echoed(tmp_path: Path) -> None:
    (tmp_path / "canaries.txt").write_text(f"{CANARY}\nshort1\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_policy_file(write(tmp_path, "dlp: {mode: report, canaries_file: canaries.txt}\n"))
    text = str(caught.value)
    assert "line 2 of 'canaries.txt' is shorter than 8 characters" in text
    assert "short1" not in text and CANARY not in text


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"\xff\xfe", "is not UTF-8"), (b"x" * (1 << 20 + 1), "is over 1048576 bytes")],
)
def test_unreadable_canaries(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "canaries.txt").write_bytes(content)
    with pytest.raises(PolicyValidationError, match=message):
        load_policy_file(write(tmp_path, "dlp: {mode: report, canaries_file: canaries.txt}\n"))


@pytest.mark.parametrize("spelling", ["off", '"off"'])
def test_off_needs_no_quotes_where_it_is_one_of_the_words(tmp_path: Path, spelling: str) -> None:
    # `off` is a YAML 1.1 boolean everywhere else; here it is the word the key takes.
    policy, issues = load_policy_file(
        write(tmp_path, f"dlp: {{mode: {spelling}, untrusted_hosts: {spelling}}}\n")
    )
    assert policy.dlp.mode is DlpMode.OFF and policy.dlp.untrusted_hosts is DlpMode.OFF
    assert issues == ()


@pytest.mark.parametrize(("text", "column"), [("dlp: {mode: yes}\n", 13), ("mode: off\n", 7)])
def test_other_yaml_1_1_booleans_stay_errors(tmp_path: Path, text: str, column: int) -> None:
    with pytest.raises(PolicyValidationError) as caught:
        load_policy_file(write(tmp_path, text))
    [issue] = caught.value.issues
    assert (issue.code, issue.line, issue.col) == ("bad_boolean", 1, column)
