"""`audit summary` over a synthetic log written by the real writer."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from gateway.audit.summary import NO_CREDENTIAL_MESSAGES, parse_since, summarise_files
from gateway.config import ClientLimits
from gateway.errors import InvalidRequestError, UnauthorizedError
from gateway.policy.engine import Decision, Reason
from gateway.runtime import ClientIdentity, PolicyState
from gateway.server.proxy.auth import authenticate_basic
from gateway.tools.authfailures import AuthFailureRecorder
from gateway.tools.context import CallContext
from gateway.tools.records import (
    auth_failure_record,
    new_event_id,
    refusal_record,
    tool_record,
    tunnel_close_record,
)
from tests.policy.conftest import make_policy
from tests.server.proxy.env import curl, raw_exchange, start_env

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
    assert result["decisions"] == 10
    assert result["not_decisions"] == {
        "malformed_requests": 0, "auth_challenges": 0, "auth_failures": 0, "tunnel_closes": 0
    }  # fmt: skip
    assert result["tools"] == {
        "WebFetch": {"allow": 4, "deny": 3, "would_deny": 1, "error": 1, "malformed": 0},
        "WebSearch": {"allow": 1, "deny": 0, "would_deny": 0, "error": 0, "malformed": 0},
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
        {"id": "research-agent", "requests": 6, "denials": 1, "errors": 0, "malformed": 0,
         "distinct_domains": 3, "bytes": 400},
        {"id": "coder", "requests": 4, "denials": 2, "errors": 1, "malformed": 0,
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


# -- decisions, not records -----------------------------------------------------------------

POLICY = make_policy()


def _malformed_call() -> dict[str, Any]:
    """The record the tool registry writes for a bad argument (an unknown field)."""
    return refusal_record(
        "WebFetch",
        CallContext(policy=POLICY, client_id="coder"),
        InvalidRequestError("bogus: unknown field (known: url)"),
        url={"original": "https://typo.example/"},
    )


def _bad_url_call() -> dict[str, Any]:
    """A URL the policy's `url` rule refuses (user info): a decision of the policy."""
    decision = Decision(False, Reason.INVALID_URL, "url", POLICY.name, POLICY.sha256)
    error = InvalidRequestError("the URL is not valid", reason="invalid_url")
    return tool_record(
        "WebFetch",
        CallContext(policy=POLICY, client_id="coder"),
        decision=decision,
        error=error,
        url={"original": "https://user:pw@creds.example/"},
    )


def _tunnel_close(tls_refused: bool) -> dict[str, Any]:
    tls = Decision(False, Reason.NOT_TLS, "proxy.require_tls", POLICY.name, POLICY.sha256)
    return tunnel_close_record(
        event_id=new_event_id(),
        client_id="coder",
        policy=POLICY,
        end="client_closed",
        duration_ms=5,
        bytes_up=10,
        bytes_down=20,
        destination={"domain": "tunnel.example", "ip": "127.0.0.1", "port": 443},
        tls_decision=tls if tls_refused else None,
    )


def test_records_that_are_not_decisions_are_counted_apart(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a.jsonl")
    log.append(fetch_record(1, client={"id": "coder"}))
    log.append(_malformed_call())
    log.append(_bad_url_call())
    log.append(_tunnel_close(tls_refused=False))
    log.append(_tunnel_close(tls_refused=True))
    for message, claimed in (
        ("proxy credentials required: send Proxy-Authorization: Basic …", None),
        ("missing bearer token: send 'Authorization: Bearer <token>'", None),
        ("unknown client id or token", "coder"),
    ):
        log.append(
            auth_failure_record(
                transport="proxy",
                message=message,
                client_hint=claimed,
                source=("127.0.0.1", 4000),
                request_id=None,
            )
        )
    log.close()
    result = summarise_files([str(tmp_path / "a.jsonl")])
    assert result["records"] == 8
    assert result["decisions"] == 3  # the fetch, the invalid URL, the tunnel TLS refused
    assert result["totals"] == {"allow": 1, "deny": 2, "would_deny": 0, "error": 0}
    assert result["not_decisions"] == {
        "malformed_requests": 1, "auth_challenges": 2, "auth_failures": 1, "tunnel_closes": 1
    }  # fmt: skip
    assert result["deny_reasons"] == {"invalid_url": 1, "not_tls": 1}
    assert [row["domain"] for row in result["top_denied_domains"]] == [
        "creds.example",
        "tunnel.example",
    ]
    assert result["tools"]["WebFetch"] == {
        "allow": 1, "deny": 1, "would_deny": 0, "error": 0, "malformed": 1
    }  # fmt: skip
    assert "auth_failure" not in result["tools"]
    [coder] = result["clients"]  # an auth_failure has no client; it is no client's request
    assert (coder["id"], coder["requests"], coder["denials"], coder["malformed"]) == (
        "coder", 4, 2, 1
    )  # fmt: skip


def test_the_no_credential_messages_are_the_gateways_own() -> None:
    """The words `kind_of` looks for are those the gateway's refusals really carry."""
    state = PolicyState(POLICY, (ClientIdentity("agent", hashlib.sha256(b"t").digest(), POLICY),))
    for attempt in (lambda: authenticate_basic(state, None), lambda: state.authenticate(None)):
        with pytest.raises(UnauthorizedError) as raised:
            attempt()
        assert raised.value.message.startswith(NO_CREDENTIAL_MESSAGES)
    for attempt in (
        lambda: authenticate_basic(state, "Basic " + base64.b64encode(b"agent:x").decode()),
        lambda: state.authenticate("Bearer x"),
    ):
        with pytest.raises(UnauthorizedError) as raised:
            attempt()
        assert not raised.value.message.startswith(NO_CREDENTIAL_MESSAGES)


async def test_a_proxy_clients_probe_and_tunnel_count_as_one_decision_each(
    tmp_path: Path, make_config: Any
) -> None:
    """curl --proxy-anyauth probes without credentials first, as git does, then retries."""
    env = await start_env(tmp_path, make_config, clients=(("agent", "tok", ClientLimits()),))
    try:
        url = f"https://site.example.com:{env.tls_port}/page"
        result = await curl(
            "--proxy-anyauth", "-U", "agent:tok", "-p", "-x", env.proxy_url,
            "--cacert", env.ca.ca_path, url,
        )  # fmt: skip
        assert result.status == 200, result.stderr
        for _ in range(100):  # the tunnel_close record follows the client's close
            if any(r["event"]["action"] == "tunnel_close" for r in env.records()):
                break
            await asyncio.sleep(0.05)
        credential = base64.b64encode(b"agent:tok").decode()
        ambiguous = (  # both Content-Length and Transfer-Encoding: refused for its framing
            f"POST {env.url('/echo')} HTTP/1.1\r\nHost: site.example.com:{env.upstream_port}\r\n"
            f"Proxy-Authorization: Basic {credential}\r\n"
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        raw = await raw_exchange(env.port, ambiguous.encode(), read_timeout=1)
        assert raw.startswith(b"HTTP/1.1 400"), raw[:100]
        actions = [r["event"]["action"] for r in env.records()]
        summary = summarise_files([env.services.audit.path])
    finally:
        await env.close()
    assert actions.count("auth_failure") == 1 and actions.count("tunnel_close") == 1
    assert summary["decisions"] == 1
    assert summary["totals"] == {"allow": 1, "deny": 0, "would_deny": 0, "error": 0}
    assert summary["not_decisions"] == {
        "malformed_requests": 1, "auth_challenges": 1, "auth_failures": 0, "tunnel_closes": 1
    }  # fmt: skip
    assert summary["top_denied_domains"] == [] and summary["deny_reasons"] == {}


def test_a_window_of_failed_credentials_counts_each_failure(tmp_path: Path) -> None:
    """The recorder writes a window's repeated failures from one address as one record with
    `event.count`: the summary counts the failures, not the records."""
    clock, wall = FakeClock(100.0), FakeClock(1_800_000_000.0)
    log = open_log(tmp_path / "a.jsonl")
    recorder = AuthFailureRecorder(log, window=60, budget=1000, clock=clock, wall_clock=wall)
    for _ in range(300):
        recorder.failed(
            transport="api",
            message="unknown client id or token",
            client_hint=None,
            source=("127.0.0.9", 40000),
            request_id=None,
        )
    recorder.flush(everything=True)
    log.close()
    result = summarise_files([str(tmp_path / "a.jsonl")])
    assert result["records"] == 2  # the first failure at once, then the window's 299
    assert result["not_decisions"]["auth_failures"] == 300
    assert result["decisions"] == 0
