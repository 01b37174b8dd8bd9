"""The policy loader: golden files (a policy, then its expected issue lines), defaults, rule ids,
and hostile inputs (binary, oversized, deeply nested, alias bombs) that must end in one clear
issue, never a traceback or a hang.

Golden files: `golden/NAME.yaml` and `golden/NAME.expected`, one `LINE:COL: code: message` line
per issue in order (a warning's code written `warning[code]`). An expected file without error
lines means the policy must load. Regenerate after a deliberate change with
`GATEWAY_UPDATE_GOLDEN=1 pytest tests/policy/test_load.py` and review the diff.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.engine import Reason, decide_url
from gateway.policy.load import (
    MAX_POLICY_BYTES,
    PolicyIssue,
    PolicyValidationError,
    load_default_policy,
    load_policy_bytes,
    load_policy_file,
)
from gateway.policy.model import Action, Mode, ResultsHandling
from gateway.yamlstrict import source as yamlsource

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_CASES = sorted(GOLDEN.glob("*.yaml"))
UPDATE = os.environ.get("GATEWAY_UPDATE_GOLDEN") == "1"


def _issue_lines(data: bytes, source: str) -> tuple[list[str], bool]:
    try:
        _, issues = load_policy_bytes(data, source=source, default_name="golden")
        loaded = True
    except PolicyValidationError as exc:
        issues, loaded = exc.issues, False
    prefix = f"{source}:"
    lines = []
    for issue in issues:
        text = str(issue)
        assert text.startswith(prefix)
        lines.append(text[len(prefix) :])
    return lines, loaded


@pytest.mark.parametrize("path", GOLDEN_CASES, ids=[p.stem for p in GOLDEN_CASES])
def test_golden(path: Path) -> None:
    lines, loaded = _issue_lines(path.read_bytes(), path.name)
    expected_path = path.with_suffix(".expected")
    if UPDATE:
        expected_path.write_text("".join(line + "\n" for line in lines))
    expected = expected_path.read_text().splitlines()
    assert lines == expected
    expects_errors = any(": warning[" not in line for line in expected)
    assert loaded is not expects_errors


@pytest.mark.parametrize("path", GOLDEN_CASES, ids=[p.stem for p in GOLDEN_CASES])
def test_golden_without_libyaml(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """PyYAML's own parser (the fallback) finds the same issues at the same places; only the
    wording of syntax errors differs between the two parsers."""
    monkeypatch.setattr(yamlsource, "_Composer", yamlsource._PurePythonComposer)
    lines, _ = _issue_lines(path.read_bytes(), path.name)
    expected = path.with_suffix(".expected").read_text().splitlines()
    assert [line.split(": ", 2)[:2] for line in lines] == [
        line.split(": ", 2)[:2] for line in expected
    ]


def test_golden_files_each_have_expectations() -> None:
    stems = {p.stem for p in GOLDEN.glob("*.expected")}
    assert stems == {p.stem for p in GOLDEN_CASES}


def _load(text: str, name: str = "t") -> tuple:  # type: ignore[type-arg]
    return load_policy_bytes(text.encode(), source=f"{name}.yaml", default_name=name)


def _errors(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(PolicyValidationError) as info:
        _load(text)
    return [(i.line, i.col, i.code) for i in info.value.issues]


# --- the empty policy and the defaults table ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["https://docs.python.org/", "http://example.com/", "https://93.184.216.34/", "http://[::1]/"],
)
@pytest.mark.parametrize(
    "text", ["", "# nothing\n", "---\n", "{}\n"], ids=["empty", "comment", "marker", "mapping"]
)
def test_empty_policy_denies_every_url(text: str, url: str) -> None:
    policy, warnings = _load(text)
    assert warnings == ()
    decision, _ = decide_url(policy, url)
    assert not decision.allowed
    assert decision.reason in (Reason.DOMAIN_NOT_ALLOWED, Reason.IP_LITERAL_NOT_ALLOWED)
    assert decision.rule == "default"


DEFAULTS = [
    ("version", 1),
    ("mode", Mode.ENFORCE),
    ("default", Action.DENY),
    ("schemes", ("https", "http")),
    ("ports", (443, 80)),
    ("methods", ("GET", "HEAD")),
    ("domain_allow", ()),
    ("domain_deny", ()),
    ("block_private", True),
    ("network_allow", ()),
    ("network_deny", ()),
    ("max_redirects", 5),
    ("allow_downgrade", False),
]


@pytest.mark.parametrize(("attribute", "expected"), DEFAULTS, ids=[d[0] for d in DEFAULTS])
def test_defaults_match_the_contract_table(attribute: str, expected: object) -> None:
    policy, _ = _load("")
    assert getattr(policy, attribute) == expected


def test_default_timeouts_limits_and_tools() -> None:
    policy, _ = _load("")
    assert (policy.timeouts.connect, policy.timeouts.read, policy.timeouts.total) == (5, 15, 30)
    assert policy.limits.max_response_bytes == 10485760
    assert (policy.limits.default_max_chars, policy.limits.max_chars) == (20000, 200000)
    assert policy.limits.content_types == (
        "text/*",
        "application/json",
        "application/*+json",
        "application/xml",
        "application/*+xml",
        "application/xhtml+xml",
    )
    assert {n: (t.enabled, t.results) for n, t in policy.tools.items()} == {
        "WebFetch": (True, ResultsHandling.DROP),
        "WebSearch": (True, ResultsHandling.DROP),
        "XSearch": (False, ResultsHandling.DROP),
    }
    assert policy.tool("Research").enabled


def test_partial_sections_keep_the_other_defaults() -> None:
    policy, _ = _load(
        "tools: {XSearch: {enabled: true}}\ntimeouts: {total: 60}\nnetworks: {deny: [10.0.0.0/8]}\n"
    )
    assert policy.tools["XSearch"].enabled and policy.tools["WebFetch"].enabled
    assert (policy.timeouts.connect, policy.timeouts.total) == (5, 60)
    assert policy.block_private is True


def test_every_key_is_read() -> None:
    text = (GOLDEN / "valid_contract_example.yaml").read_text()
    text = text.replace("mode: enforce", "mode: report").replace("default: deny", "default: allow")
    text = text.replace("max: 5", "max: 3").replace(
        "allow_downgrade: false", "allow_downgrade: true"
    )
    text = text.replace("block_private: true", "block_private: false")
    text = text.replace("results: drop", "results: mark").replace("connect: 5", "connect: 2.5")
    text = text.replace("allow: []", "allow: [10.20.0.0/16]").replace(
        "deny: []", 'deny: ["fd00::/8"]'
    )
    policy, _ = _load(text)
    assert policy.mode is Mode.REPORT and policy.default is Action.ALLOW
    assert (policy.max_redirects, policy.allow_downgrade, policy.block_private) == (3, True, False)
    assert policy.tools["WebSearch"].results is ResultsHandling.MARK
    assert policy.timeouts.connect == 2.5
    assert [str(r.network) for r in policy.network_allow] == ["10.20.0.0/16"]
    assert [(str(r.network), r.rule_id) for r in policy.network_deny] == [
        ("fd00::/8", "networks.deny[0]")
    ]


# --- identity: name, sha256, rule ids ----------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "text", "name"),
    [
        ("research.yaml", "", "research"),
        ("research.yml", "", "research"),
        ("research.policy", "", "research.policy"),
        ("research.yaml", "name: agents-v2\n", "agents-v2"),
    ],
    ids=["yaml", "yml", "other-suffix", "explicit"],
)
def test_name_defaults_to_the_file_name(
    tmp_path: Path, filename: str, text: str, name: str
) -> None:
    path = tmp_path / filename
    path.write_text(text)
    policy, _ = load_policy_file(path)
    assert policy.name == name
    assert policy.source == str(path)


def test_sha256_is_over_the_files_bytes(tmp_path: Path) -> None:
    data = b"# comment changes the hash\ndomains: {allow: [docs.python.org]}\n"
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    policy, _ = load_policy_file(path)
    assert policy.sha256 == hashlib.sha256(data).hexdigest()


# --- issues: shape, order, severity --------------------------------------------------------------


def test_issue_prints_file_line_col_code_message() -> None:
    with pytest.raises(PolicyValidationError) as info:
        _load("version: 1\nnmae: x\n", name="policies/p")
    (issue,) = info.value.issues
    assert issue == PolicyIssue(
        "policies/p.yaml", 2, 1, "unknown_key", "unknown key nmae; did you mean 'name'?", "error"
    )
    assert str(issue) == "policies/p.yaml:2:1: unknown_key: unknown key nmae; did you mean 'name'?"
    assert str(info.value) == str(issue)


def test_warnings_are_returned_not_raised() -> None:
    policy, warnings = _load("domains: {allow: [.github.io]}\n")
    assert [(w.code, w.severity, w.line, w.col) for w in warnings] == [
        ("pattern_broad", "warning", 1, 19)
    ]
    assert str(warnings[0]).startswith("t.yaml:1:19: warning[pattern_broad]: ")
    assert policy.domain_allow[0].pattern.domain == "github.io"


def test_errors_carry_the_warnings_too_sorted_by_position() -> None:
    issues = _errors("ports: [0]\ndomains: {allow: [.github.io, '*.com']}\nversion: 3\n")
    assert issues == [
        (1, 9, "out_of_range"),
        (2, 19, "pattern_broad"),
        (2, 31, "pattern_too_broad"),
        (3, 10, "bad_version"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\na: 2\n", [(1, 1, "unknown_key"), (2, 1, "duplicate_key")]),
        ("name: x\nname: y\n", [(2, 1, "duplicate_key")]),
        ("tools: {WebFetch: {enabled: true, enabled: false}}\n", [(1, 35, "duplicate_key")]),
    ],
    ids=["unknown", "top-level", "nested"],
)
def test_duplicate_keys_name_both_positions(text: str, expected: list) -> None:  # type: ignore[type-arg]
    with pytest.raises(PolicyValidationError) as info:
        _load(text)
    assert [(i.line, i.col, i.code) for i in info.value.issues] == expected
    duplicate = next(i for i in info.value.issues if i.code == "duplicate_key")
    assert "(first at 1:" in duplicate.message


# --- hostile input -----------------------------------------------------------------------------

BINARY = [
    (b"version: 1\n\x00\x00\x00", (2, 1)),
    (b"domains:\n  allow: [caf\xe9.example]\n", (2, 14)),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", (1, 1)),
    (b"\xff\xfev\x00e\x00r\x00", (1, 1)),
]


@pytest.mark.parametrize(("data", "position"), BINARY, ids=["nul", "latin-1", "png", "utf-16"])
def test_binary_content_is_one_clear_error(data: bytes, position: tuple[int, int]) -> None:
    with pytest.raises(PolicyValidationError) as info:
        load_policy_bytes(data, source="b.yaml", default_name="b")
    (issue,) = info.value.issues
    assert (issue.code, (issue.line, issue.col)) == ("binary_file", position)


def test_control_characters_are_a_syntax_error() -> None:
    assert _errors("name: a\x01b\n") == [(1, 8, "yaml_syntax")]


def test_a_50_mb_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:  # sparse: costs no disk, and no memory unless read
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(PolicyValidationError) as info:
        load_policy_file(path)
    (issue,) = info.value.issues
    assert (issue.code, issue.file, issue.line) == ("file_too_large", str(path), 1)
    assert "52428800 bytes" in issue.message


def test_bytes_over_the_cap_are_refused() -> None:
    data = b"# " + b"x" * MAX_POLICY_BYTES
    with pytest.raises(PolicyValidationError) as info:
        load_policy_bytes(data, source="big.yaml", default_name="big")
    assert [i.code for i in info.value.issues] == ["file_too_large"]


def test_a_file_just_under_the_cap_loads() -> None:
    data = b"# " + b"x" * (MAX_POLICY_BYTES - 3) + b"\n"
    policy, _ = load_policy_bytes(data, source="ok.yaml", default_name="ok")
    assert policy.name == "ok"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("[" * 100_000, "too_deep"),
        ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 200)), "too_deep"),
        ("{a: " * 5000, "too_deep"),
    ],
    ids=["flow-lists", "block-lists", "flow-mappings"],
)
def test_deep_nesting_is_refused(text: str, code: str) -> None:
    assert [c for _, _, c in _errors(text)] == [code]


@pytest.mark.parametrize(
    ("path", "code"),
    [("missing.yaml", "unreadable"), (".", "unreadable"), ("fifo.yaml", "unreadable")],
    ids=["missing", "directory", "fifo-without-writer"],
)
def test_unreadable_files(tmp_path: Path, path: str, code: str) -> None:
    os.mkfifo(tmp_path / "fifo.yaml")  # opening it for reading would block
    with pytest.raises(PolicyValidationError) as info:
        load_policy_file(tmp_path / path)
    assert [i.code for i in info.value.issues] == [code]


YAML_ALPHABET = st.sampled_from(
    list("abc:-[]{},&*!|>'\"#%@`?\n\t 0123456789.")
    + ["yes", "- ", ": ", "\n  ", "&a ", "*a", "---\n", "\x00", "é"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(YAML_ALPHABET, max_size=60).map("".join))
def test_any_text_loads_or_fails_with_issues(text: str) -> None:
    try:
        _load(text)
    except PolicyValidationError as exc:
        assert exc.issues
        assert all(i.line >= 1 and i.col >= 1 and i.code for i in exc.issues)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_load_or_fail_with_issues(data: bytes) -> None:
    try:
        load_policy_bytes(data, source="x.yaml", default_name="x")
    except PolicyValidationError as exc:
        assert exc.issues


def test_the_embedded_default_loads() -> None:
    policy = load_default_policy()
    assert policy.source == "<embedded default>"
    assert policy.block_private is True
    decision, _ = decide_url(policy, "http://169.254.169.254/latest/meta-data/")
    assert not decision.allowed
