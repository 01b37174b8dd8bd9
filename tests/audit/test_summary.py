"""`audit summary` over a synthetic log written by the real writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.audit.summary import parse_since, summarise_files

from .logfiles import FakeClock, fetch_record, new_signer, open_log

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def denial(i: int, client: str, domain: str, rule: str, reason: str) -> dict[str, Any]:
    return fetch_record(
        i,
        event={"id": f"d{i}", "action": "WebFetch", "outcome": "failure", "type": ["denied"]},
        client={"id": client},
        policy={"name": "p", "decision": "deny", "enforced": True, "rule": rule, "reason": reason},
        url={"original": f"https://{domain}/x"},
        destination={"domain": domain},
        http={"request": {"method": "GET"}},
    )


@pytest.fixture
def synthetic_log(tmp_path: Path) -> str:
    clock = FakeClock(T0)
    signer, _ = new_signer()
    log = open_log(tmp_path / "a.jsonl", clock=clock, signer=signer)
    # 08:00 - 08:59: three allowed fetches by research-agent, one with sanitised content
    for i in range(3):
        clock.now = T0 + 60 * i
        log.append(fetch_record(i))
    clock.now = T0 + 300
    log.append(
        fetch_record(
            3,
            destination={"domain": "blog.example"},
            sanitized={"marker_lookalikes": 2, "invisible_chars": 5},
        )
    )
    # 09:00 - 09:59: denials by two clients, an error, a would-be denial, a search
    clock.now = T0 + 3600
    log.append(denial(4, "research-agent", "paste.example", "default", "domain_not_allowed"))
    clock.now = T0 + 3700
    log.append(denial(5, "coder", "paste.example", "default", "domain_not_allowed"))
    clock.now = T0 + 3800
    log.append(denial(6, "coder", "169.254.169.254", "networks.metadata", "metadata_address"))
    clock.now = T0 + 3900
    log.append(
        fetch_record(
            7,
            client={"id": "coder"},
            event={"action": "WebFetch", "outcome": "failure", "type": ["allowed"]},
            http={"request": {"method": "GET"}},
            destination={"domain": "slow.example"},
        )
    )
    clock.now = T0 + 4000
    log.append(
        fetch_record(
            8,
            client={"id": "coder"},
            policy={"decision": "allow", "enforced": False, "rule": "default",
                    "reason": "domain_not_allowed"},
            destination={"domain": "new.example"},
            http={"response": {"status_code": 200, "bytes": 7}},
        )
    )  # fmt: skip
    clock.now = T0 + 4100
    log.append(
        {
            "event": {"action": "WebSearch", "outcome": "success", "type": ["allowed"]},
            "client": {"id": "research-agent"},
            "policy": {"decision": "allow"},
            "sanitized": {"marker_lookalikes": "many", "invisible_chars": -3},  # ignored
        }
    )
    log.close()
    with (tmp_path / "a.jsonl").open("ab") as handle:
        handle.write(b"not json\n[1]\n")
    return str(tmp_path / "a.jsonl")


def test_summary_counts_everything_reviewers_ask_for(synthetic_log: str) -> None:
    result = summarise_files([synthetic_log])
    assert result["records"] == 10
    assert result["skipped_lines"] == 2
    assert result["window"] == {
        "since": None,
        "first": "2027-01-15T08:00:00Z",
        "last": "2027-01-15T09:08:20Z",
    }
    assert result["totals"] == {"allow": 5, "deny": 3, "would_deny": 1, "error": 1}
    assert result["tools"] == {
        "WebFetch": {"allow": 4, "deny": 3, "would_deny": 1, "error": 1},
        "WebSearch": {"allow": 1, "deny": 0, "would_deny": 0, "error": 0},
    }
    assert result["top_denied_domains"] == [
        {
            "domain": "paste.example",
            "count": 2,
            "rule": "default",
            "reason": "domain_not_allowed",
            "first_seen": "2027-01-15T09:00:00Z",
            "last_seen": "2027-01-15T09:01:40Z",
        },
        {
            "domain": "169.254.169.254",
            "count": 1,
            "rule": "networks.metadata",
            "reason": "metadata_address",
            "first_seen": "2027-01-15T09:03:20Z",
            "last_seen": "2027-01-15T09:03:20Z",
        },
    ]
    assert result["clients"] == [
        {"id": "research-agent", "requests": 6, "denials": 1, "errors": 0,
         "distinct_domains": 3, "bytes": 400},
        {"id": "coder", "requests": 4, "denials": 2, "errors": 1,
         "distinct_domains": 4, "bytes": 7},
    ]  # fmt: skip
    assert result["deny_reasons"] == {"domain_not_allowed": 2, "metadata_address": 1}
    assert result["timeline"] == [
        {"hour": "2027-01-15T08:00Z", "allow": 4, "deny": 0, "would_deny": 0, "error": 0},
        {"hour": "2027-01-15T09:00Z", "allow": 1, "deny": 3, "would_deny": 1, "error": 1},
    ]
    assert result["injection_signals"] == [
        {"domain": "blog.example", "records": 1, "marker_lookalikes": 2, "invisible_chars": 5}
    ]


def test_summary_filters_by_client_and_time(synthetic_log: str) -> None:
    coder = summarise_files([synthetic_log], client="coder")
    assert coder["records"] == 4 and coder["client"] == "coder"
    assert [row["id"] for row in coder["clients"]] == ["coder"]

    recent = summarise_files([synthetic_log], since=T0 + 3600)
    assert recent["records"] == 6
    assert recent["totals"] == {"allow": 1, "deny": 3, "would_deny": 1, "error": 1}
    assert recent["window"]["since"] == "2027-01-15T09:00:00Z"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("24h", T0 - 86400),
        ("30m", T0 - 1800),
        ("7d", T0 - 7 * 86400),
        ("2w", T0 - 14 * 86400),
        ("90s", T0 - 90),
        ("1.5h", T0 - 5400),
        ("2027-01-15T06:00:00Z", T0 - 7200),
        ("2027-01-15T06:00:00.500Z", T0 - 7199.5),
        ("2027-01-15T06:00", T0 - 7200),
        ("2027-01-15", T0 - 8 * 3600),
    ],
)
def test_since_accepts_durations_and_times(text: str, expected: float) -> None:
    assert parse_since(text, now=T0) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "24", "-5h", "h", "2027-13-45T99:00:00Z x"])
def test_since_rejects_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="--since"):
        parse_since(text, now=T0)
