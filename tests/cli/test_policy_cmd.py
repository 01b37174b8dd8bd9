"""`gateway policy check|explain|test`, run in-process through `gateway.cli.main` (and once as
a real subprocess). `--resolve` is exercised with a fake system resolver, never real DNS."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main

POLICY = """\
version: 1
name: research
domains:
  allow: [docs.python.org, .wikipedia.org, mirror.internal.example]
  deny:
    - upload.wikimedia.org
    - {host: .pastebin.com, message: paste sites are closed}
networks:
  allow: [10.20.0.0/16]
"""

REPORT_POLICY = "mode: report\ndomains: {allow: [docs.python.org]}\n"


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "research.yaml"
    path.write_text(POLICY)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# --- check ---------------------------------------------------------------------------------


def test_check_good_file(capsys: pytest.CaptureFixture[str], policy: Path) -> None:
    status, out, _ = run(capsys, "policy", "check", policy)
    assert status == 0
    assert out.splitlines() == [
        f"{policy}: ok (name research, sha256 "
        f"{__import__('hashlib').sha256(policy.read_bytes()).hexdigest()})"
    ]


def test_check_prints_every_problem_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 2\nports: [0]\nnmae: x\ndomains: {allow: ['*.com']}\n")
    status, out, _ = run(capsys, "policy", "check", path)
    assert status == 1
    assert out.splitlines() == [
        f"{path}:1:10: bad_version: version must be 1 (the only policy format), got 2",
        f"{path}:2:9: out_of_range: ports[0] must be an integer from 1 to 65535, got 0",
        f"{path}:3:1: unknown_key: unknown key nmae; did you mean 'name'?",
        f"{path}:4:19: pattern_too_broad: domains.allow[0]: '*.com' allows a whole public suffix"
        " (com); name a registrable domain under it instead",
    ]


def test_check_warnings_alone_exit_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pages.yaml"
    path.write_text("domains: {allow: [.github.io]}\n")
    status, out, _ = run(capsys, "policy", "check", path)
    lines = out.splitlines()
    assert status == 0
    assert lines[0].startswith(f"{path}:1:19: warning[pattern_broad]: domains.allow[0]: ")
    assert lines[1].startswith(f"{path}: ok (name pages, sha256 ")


@pytest.mark.parametrize(
    ("files", "status"),
    [(["good"], 0), (["good", "bad"], 1), (["bad", "good"], 1), (["good", "missing"], 1)],
    ids=["one-good", "good-then-bad", "bad-then-good", "missing"],
)
def test_check_several_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: list[str], status: int
) -> None:
    (tmp_path / "good.yaml").write_text("")
    (tmp_path / "bad.yaml").write_text("mode: yes\n")
    code, out, _ = run(capsys, "policy", "check", *(tmp_path / f"{f}.yaml" for f in files))
    assert code == status
    assert f"{tmp_path / 'good.yaml'}: ok (name good, sha256 " in out
    if "bad" in files:
        assert f"{tmp_path / 'bad.yaml'}:1:7: bad_boolean: " in out
    if "missing" in files:
        assert f"{tmp_path / 'missing.yaml'}:1:1: unreadable: cannot read the file: " in out


def test_check_as_a_subprocess(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schemes: [ftp]\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "policy", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout.startswith(f"{bad}:1:11: unknown_scheme: schemes[0]: unknown scheme 'ftp'")
    assert result.stderr == ""


# --- explain -------------------------------------------------------------------------------

EXPLAIN = [
    ("https://docs.python.org/3/", "allow", None, "domains.allow[0]", None),
    ("https://en.wikipedia.org/wiki/X", "allow", None, "domains.allow[1]", None),
    ("https://upload.wikimedia.org/x.png", "deny", "domain_denied", "domains.deny[0]", None),
    (
        "https://pastebin.com/raw/1",
        "deny",
        "domain_denied",
        "domains.deny[1]",
        "paste sites are closed",
    ),
    ("https://example.com/", "deny", "domain_not_allowed", "default", None),
    ("ftp://docs.python.org/", "deny", "scheme_not_allowed", "schemes", None),
    ("https://docs.python.org:8443/", "deny", "port_not_allowed", "ports", None),
    ("http://10.20.0.7/", "allow", None, "networks.allow[0]", None),
    ("http://10.0.0.1/", "deny", "ip_literal_not_allowed", "default", None),
    ("not a url", "deny", "invalid_url", "url", None),
]


@pytest.mark.parametrize(
    ("url", "decision", "reason", "rule", "message"), EXPLAIN, ids=[e[0] for e in EXPLAIN]
)
def test_explain_json(
    capsys: pytest.CaptureFixture[str],
    policy: Path,
    url: str,
    decision: str,
    reason: str | None,
    rule: str,
    message: str | None,
) -> None:
    status, out, _ = run(capsys, "policy", "explain", "--json", policy, url)
    assert status == 0
    (line,) = out.splitlines()
    record = json.loads(line)
    assert record == {
        "url": url,
        "decision": decision,
        "reason": reason,
        "rule": rule,
        "enforced": True,
        "message": record["message"],
        "hint": record["hint"],
        "detail": record["detail"],
        "note": None,
    }
    # A refusal answers with what the agent would be shown, and how to allow it.
    assert (record["message"] is None) == (decision == "allow")
    assert message is None or message in record["message"]
    if url.startswith("ftp:"):  # no policy lists ftp: the gateway never fetches it
        assert record["hint"].startswith("never allowed: ") and "schemes" not in record["hint"]
    elif decision == "deny" and reason != "invalid_url":
        assert record["hint"].startswith("to allow it, ") and record["hint"] in record["message"]
    else:
        assert record["hint"] is None


def test_explain_text_one_block_per_url(capsys: pytest.CaptureFixture[str], policy: Path) -> None:
    status, out, _ = run(
        capsys, "policy", "explain", policy, "https://docs.python.org/", "https://pastebin.com/x"
    )
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "https://docs.python.org/: allow (rule domains.allow[0])"
    assert lines[2] == "https://pastebin.com/x: deny (domain_denied, rule domains.deny[1])"
    assert "paste sites are closed" in lines[3]


def test_explain_report_mode_says_not_enforced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "rollout.yaml"
    path.write_text(REPORT_POLICY)
    _, out, _ = run(
        capsys, "policy", "explain", "--json", path, "https://example.com/", "http://10.0.0.1/"
    )
    first, second = (json.loads(line) for line in out.splitlines())
    assert (first["decision"], first["reason"], first["rule"], first["enforced"]) == (
        "deny",
        "domain_not_allowed",
        "default",
        False,
    )
    # Address checks hold in every mode: the literal passes the relaxed step 3, then step 4 denies.
    assert (second["decision"], second["reason"], second["enforced"]) == (
        "deny",
        "private_address",
        True,
    )


def test_explain_tool_flag(capsys: pytest.CaptureFixture[str], policy: Path) -> None:
    _, out, _ = run(
        capsys,
        "policy",
        "explain",
        "--json",
        "--tool",
        "XSearch",
        policy,
        "https://docs.python.org/",
    )
    record = json.loads(out)
    assert (record["decision"], record["reason"], record["rule"]) == (
        "deny",
        "tool_disabled",
        "tools.XSearch.enabled",
    )


METHODS = [
    # (id, url, method, decision, reason, rule, method checked)
    ("http POST", "http://docs.python.org/", "POST", "deny", "method_not_allowed", "methods", True),
    ("http GET", "http://docs.python.org/", "GET", "allow", None, "domains.allow[0]", True),
    # https goes through a CONNECT tunnel: the gateway never sees the method.
    ("https POST", "https://docs.python.org/", "POST", "allow", None, "domains.allow[0]", False),
    (
        "https DELETE denied host",
        "https://example.com/",
        "DELETE",
        "deny",
        "domain_not_allowed",
        "default",
        False,
    ),
    ("https literal", "https://10.20.0.7/", "PUT", "allow", None, "networks.allow[0]", False),
]


@pytest.mark.parametrize(
    ("url", "method", "decision", "reason", "rule", "checked"),
    [m[1:] for m in METHODS],
    ids=[m[0] for m in METHODS],
)
def test_explain_method_applies_to_plain_http_only(
    capsys: pytest.CaptureFixture[str],
    policy: Path,
    url: str,
    method: str,
    decision: str,
    reason: str | None,
    rule: str,
    checked: bool,
) -> None:
    _, out, _ = run(capsys, "policy", "explain", "--json", "--method", method, policy, url)
    record = json.loads(out)
    assert (record["decision"], record["reason"], record["rule"]) == (decision, reason, rule)
    if checked:
        assert record["note"] is None
    else:
        assert "CONNECT" in record["note"] and method in record["note"]
    _, text, _ = run(capsys, "policy", "explain", "--method", method, policy, url)
    assert ("note: methods not checked" in text) == (not checked)


@pytest.mark.parametrize(
    ("mode", "ports", "authority", "decision", "reason", "rule", "enforced"),
    [
        ("enforce", None, "docs.python.org:443", "allow", None, "domains.allow[0]", True),
        (
            "enforce",
            None,
            "docs.python.org:8443",
            "deny",
            "port_not_allowed",
            "proxy.connect_ports",
            True,
        ),
        ("enforce", "443,8443", "docs.python.org:8443", "deny", "port_not_allowed", "ports", True),
        (
            "report",
            None,
            "https://docs.python.org:8443/x",
            "deny",
            "port_not_allowed",
            "proxy.connect_ports",
            False,
        ),
        ("enforce", None, "docs.python.org", "deny", "invalid_url", "url", True),
    ],
    ids=["allowed", "connect-port", "policy-port", "report", "no-port"],
)
def test_explain_connect_applies_the_gateway_configurations_ports(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    mode: str,
    ports: str | None,
    authority: str,
    decision: str,
    reason: str | None,
    rule: str,
    enforced: bool,
) -> None:
    path = tmp_path / "tunnels.yaml"
    path.write_text(f"mode: {mode}\ndomains: {{allow: [docs.python.org]}}\n")
    extra = ("--connect-ports", ports) if ports else ()
    argv = ("policy", "explain", "--json", "--method", "CONNECT", *extra, path, authority)
    _, out, _ = run(capsys, *argv)
    record = json.loads(out)
    assert (record["decision"], record["reason"], record["rule"], record["enforced"]) == (
        decision,
        reason,
        rule,
        enforced,
    )
    _, text, _ = run(capsys, *argv[:2], *argv[3:])
    if rule == "proxy.connect_ports":
        assert "by the gateway configuration (proxy.connect_ports" in text


def test_explain_connect_ports_must_be_ports(
    capsys: pytest.CaptureFixture[str], policy: Path
) -> None:
    with pytest.raises(SystemExit):
        run(
            capsys,
            "policy",
            "explain",
            "--method",
            "CONNECT",
            "--connect-ports",
            "0",
            policy,
            "a:1",
        )
    assert "ports are 1 to 65535" in capsys.readouterr().err


NO_TOOLS_POLICY = """\
domains: {allow: [docs.python.org]}
methods: [GET]
tools: {WebFetch: {enabled: false}, WebSearch: {enabled: false}}
"""


@pytest.mark.parametrize(
    ("argv", "decision", "reason", "rule"),
    [
        # The forward proxy serves no tool: disabled tools do not decide its requests.
        (["--method", "GET"], "allow", None, "domains.allow[0]"),
        (["--method", "POST"], "deny", "method_not_allowed", "methods"),
        ([], "deny", "tool_disabled", "tools.WebFetch.enabled"),
        (
            ["--method", "GET", "--tool", "WebFetch"],
            "deny",
            "tool_disabled",
            "tools.WebFetch.enabled",
        ),
    ],
    ids=["method", "method-denied", "no-method", "method-and-tool"],
)
def test_explain_method_is_judged_as_the_proxy_without_a_tool(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    decision: str,
    reason: str | None,
    rule: str,
) -> None:
    path = tmp_path / "proxy-only.yaml"
    path.write_text(NO_TOOLS_POLICY)
    _, out, _ = run(capsys, "policy", "explain", "--json", *argv, path, "http://docs.python.org/")
    record = json.loads(out)
    assert (record["decision"], record["reason"], record["rule"]) == (decision, reason, rule)
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "- {url: 'http://docs.python.org/', method: GET, expect: allow}\n"
        "- {url: 'https://docs.python.org/', method: PUT, expect: allow}\n"
        "- {url: 'http://docs.python.org/', expect: deny, reason: tool_disabled}\n"
    )
    status, out, _ = run(capsys, "policy", "test", path, cases)
    assert (status, out) == (0, "3 passed, 0 failed\n")


def test_explain_broken_policy_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("mode: on\n")
    status, out, err = run(capsys, "policy", "explain", path, "https://docs.python.org/")
    assert (status, out) == (2, "")
    assert f"{path}:1:7: bad_boolean: " in err


class FakeResolver:
    """Stands in for the system resolver: a table of names; any other name fails."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (
                socket.AF_INET6 if ":" in ip else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (ip, port),
            )
            for ip in self.table[host]
        ]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> FakeResolver:
    fake = FakeResolver(
        {
            "docs.python.org.": ["151.101.0.223", "2a04:4e42::223"],
            "en.wikipedia.org.": ["198.35.26.96", "10.0.0.5"],
            "mirror.internal.example.": ["10.20.0.7"],
        }
    )
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


def test_explain_never_resolves_without_the_flag(
    capsys: pytest.CaptureFixture[str], policy: Path, resolver: FakeResolver
) -> None:
    run(capsys, "policy", "explain", policy, "https://docs.python.org/", "https://example.com/")
    assert resolver.asked == []


RESOLVED = [
    (
        "https://docs.python.org/",
        "allow",
        None,
        "domains.allow[0]",
        ["151.101.0.223", "2a04:4e42::223"],
    ),
    (
        "https://en.wikipedia.org/",
        "deny",
        "private_address",
        "networks.block_private",
        ["198.35.26.96", "10.0.0.5"],
    ),
    ("https://mirror.internal.example/", "allow", None, "networks.allow[0]", ["10.20.0.7"]),
    ("https://gone.wikipedia.org/", "deny", "upstream_unreachable", "resolve", []),
]


@pytest.mark.parametrize(
    ("url", "decision", "reason", "rule", "addresses"), RESOLVED, ids=[r[0] for r in RESOLVED]
)
def test_explain_resolve_checks_every_address(
    capsys: pytest.CaptureFixture[str],
    policy: Path,
    resolver: FakeResolver,
    url: str,
    decision: str,
    reason: str | None,
    rule: str,
    addresses: list[str],
) -> None:
    _, out, _ = run(capsys, "policy", "explain", "--json", "--resolve", policy, url)
    record = json.loads(out)
    assert (record["decision"], record["reason"], record["rule"]) == (decision, reason, rule)
    assert record["addresses"] == addresses
    assert (record["lookup_error"] is not None) == (reason == "upstream_unreachable")
    assert all(name.endswith(".") for name in resolver.asked)  # absolute names only


def test_explain_resolve_skips_denied_names(
    capsys: pytest.CaptureFixture[str], policy: Path, resolver: FakeResolver
) -> None:
    _, out, _ = run(
        capsys,
        "policy",
        "explain",
        "--resolve",
        policy,
        "https://example.com/",
        "http://10.20.0.7/",
    )
    assert resolver.asked == []  # a denied name never reaches DNS; a literal needs none
    assert "example.com/: deny (domain_not_allowed, rule default)" in out


# --- test ----------------------------------------------------------------------------------

CASES = """\
- {url: "https://docs.python.org/3/", expect: allow, rule: "domains.allow[0]"}
- {url: "https://pastebin.com/x", expect: deny, reason: domain_denied, rule: "domains.deny[1]"}
- url: https://en.wikipedia.org/
  expect: deny
  reason: private_address
  rule: networks.block_private
  addresses: [198.35.26.96, 10.0.0.5]
- {url: "https://mirror.internal.example/", expect: allow, rule: "networks.allow[0]", addresses: [10.20.0.7]}
- {url: "https://docs.python.org/", expect: deny, reason: tool_disabled, tool: XSearch}
- {url: "http://docs.python.org/", expect: deny, reason: method_not_allowed, method: POST}
- {url: "https://docs.python.org/", expect: allow, method: POST}
- {url: "http://169.254.169.254/", expect: deny, reason: ip_literal_not_allowed}
- url: https://mirror.internal.example/
  addresses: [10.20.0.7, 169.254.169.254]
  expect: deny
  reason: metadata_address
  rule: networks.metadata
"""


def test_cases_pass(capsys: pytest.CaptureFixture[str], policy: Path, tmp_path: Path) -> None:
    cases = tmp_path / "research.tests.yaml"
    cases.write_text(CASES)
    status, out, _ = run(capsys, "policy", "test", policy, cases)
    assert (status, out) == (0, "9 passed, 0 failed\n")


def test_cases_failures_are_listed_with_their_line(
    capsys: pytest.CaptureFixture[str], policy: Path, tmp_path: Path
) -> None:
    cases = tmp_path / "c.yaml"
    cases.write_text(
        "- {url: 'https://docs.python.org/', expect: allow}\n"
        "- url: https://docs.python.org/\n"
        "  expect: deny\n"
        "  reason: private_address\n"
        "  rule: networks.block_private\n"
        "- {url: 'https://example.com/', expect: allow}\n"
        "- {url: 'https://example.com/', expect: deny, rule: 'domains.deny[0]'}\n"
    )
    status, out, _ = run(capsys, "policy", "test", policy, cases)
    assert status == 1
    assert out.splitlines() == [
        f"{cases}:2: https://docs.python.org/: expected deny/private_address/networks.block_private,"
        " got allow/-/domains.allow[0]",
        f"{cases}:6: https://example.com/: expected allow/-/*, got deny/domain_not_allowed/default",
        f"{cases}:7: https://example.com/: expected deny/*/domains.deny[0],"
        " got deny/domain_not_allowed/default",
        "1 passed, 3 failed",
    ]


@pytest.mark.parametrize(
    ("text", "issue"),
    [
        (
            "- {url: 'https://x.org/', expect: allow, expected: deny}\n",
            ":1:42: unknown_key: unknown key [0].expected",
        ),
        (
            "- {url: 'https://x.org/', expect: maybe}\n",
            ":1:35: bad_value: [0].expect must be one of allow, deny",
        ),
        ("- {url: 'https://x.org/'}\n", ":1:3: missing_key: [0].expect is required"),
        (
            "- {url: 'https://x.org/', expect: deny, reason: privat_address}\n",
            "did you mean 'private_address'?",
        ),
        (
            "- {url: 'https://x.org/', expect: deny, addresses: [10.0.0.300]}\n",
            ":1:53: bad_address: ",
        ),
        (
            "- {url: 'https://x.org/', expect: deny, tool: Browse}\n",
            ":1:47: bad_value: [0].tool must be one of",
        ),
        ("url: https://x.org/\n", ":1:1: wrong_type: the cases file must be a list, got a mapping"),
        ("", ":1:1: no_cases: "),
        ("[]\n", ":1:1: bad_value: the cases file must list at least one case"),
        ("- {url: a, expect: allow, url: b}\n", ":1:27: duplicate_key: "),
    ],
    ids=[
        "unknown-key",
        "bad-expect",
        "missing-expect",
        "bad-reason",
        "bad-address",
        "bad-tool",
        "mapping",
        "empty",
        "empty-list",
        "duplicate",
    ],
)
def test_broken_cases_file_exits_2(
    capsys: pytest.CaptureFixture[str], policy: Path, tmp_path: Path, text: str, issue: str
) -> None:
    cases = tmp_path / "c.yaml"
    cases.write_text(text)
    status, out, err = run(capsys, "policy", "test", policy, cases)
    assert (status, out) == (2, "")
    assert issue in err
    assert err.startswith(f"{cases}:")
