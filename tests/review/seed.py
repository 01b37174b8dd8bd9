"""Audit folders for the review tests, written by the gateway's own audit writer: two instances
(one with a rotated file), several clients, refusals, a policy reload, and records carrying the
hostile strings a page must show as text (`HOSTILE`), the beacon URL of a listener that the
browser tests watch included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.audit import AuditLog
from gateway.errors import GatewayError, InvalidRequestError
from gateway.policy.engine import Decision
from gateway.provenance.dsse import Signer, generate_keypair
from gateway.tools.context import CallContext
from gateway.tools.records import (
    auth_failure_record,
    new_event_id,
    proxy_record,
    refusal_record,
    tool_record,
    tunnel_close_record,
)
from tests.audit.logfiles import FakeClock, fetch_record, read_lines, write_lines
from tests.policy.conftest import make_policy

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BIG = "A" * 100_000 + "THE-END-OF-THE-BIG-VALUE"


def hostile_strings(beacon: str) -> dict[str, str]:
    """name -> value; `beacon` is a URL whose fetching would prove that a script ran."""
    return {
        "script": f"<script>document.title='pwned';window.pwned=1;fetch('{beacon}/script')</script>",
        "img": f'"><img src=x onerror="window.pwned=1;fetch(\'{beacon}/img\')">',
        "javascript": f"javascript:fetch('{beacon}/js')",
        "data": "data:text/html,<script>window.pwned=1</script>",
        "rtl": "https://example.com/\u202etxt.exe",
        "zero_width": "exa\u200bmple.com",
        "style": f"<style>body{{background:url({beacon}/css)}}</style>",
        "svg": f"<svg onload=\"fetch('{beacon}/svg')\"></svg>",
        "template": "{{ 7*7 }}{% raw %}",
    }


def denied(i: int, **fields: Any) -> dict[str, Any]:
    record = fetch_record(i, **fields)
    record["event"].update(outcome="failure", type=["denied"])
    record["policy"].update(decision="deny", rule="default", reason="domain_not_allowed")
    record["http"] = {"request": {"method": "GET"}}
    return record


def write_folder(folder: Path, *, beacon: str = "http://127.0.0.1:9/beacon") -> dict[str, Any]:
    """A realistic audit folder: chain gw-a signed (checkpoints at each rotation) and rotated,
    gw-b plain, gw-c with an edited record (its chain INVALID at line 3). The signing key
    (PEM) sits beside the folder, in `keys/`. Returns what the tests look for."""
    folder.mkdir(parents=True, exist_ok=True)
    template = str(folder / "gateway-{instance}.jsonl")
    clock = FakeClock(START)
    hostile = hostile_strings(beacon)
    keys = folder.parent / "keys"
    keys.mkdir(exist_ok=True)
    private_key, _, _ = generate_keypair(keys)
    signer = Signer.from_pem_file(private_key)

    main = AuditLog(
        template, instance_id="gw-a", version="test", clock=clock, rotate_bytes=4096, signer=signer
    )
    main.open()
    for i in range(30):
        clock.now += 60
        client = "research-agent" if i % 3 else "coding-agent"
        if i % 5 == 4:
            main.append(
                denied(i, client={"id": client}, destination={"domain": f"blocked{i % 2}.example"})
            )
        else:
            main.append(
                fetch_record(
                    i, client={"id": client}, destination={"domain": f"docs{i % 4}.example.org"}
                )
            )
    clock.now += 30
    main.append(
        {
            "event": {"action": "policy_reload", "outcome": "success", "type": ["change"]},
            "policy": {"name": "research-v2", "sha256": "ab" * 32, "previous_sha256": "0" * 64},
        }
    )
    for n, (name, value) in enumerate(hostile.items()):
        clock.now += 60
        record = denied(100 + n, client={"id": "research-agent"})
        record["url"] = {"original": value, "full": value}
        record["destination"] = {"domain": value[:200], "port": 443}
        record["policy"]["rule"] = f"rule-{name}"
        record["redirects"] = [
            {"url": value, "status": 302, "decision": "deny", "rule": "default", "reason": value}
        ]
        record["search"] = {"query": value}
        main.append(record)
    clock.now += 60
    big = fetch_record(200, client={"id": "coding-agent"}, destination={"domain": "big.example"})
    big["url"] = {"original": "https://big.example/" + BIG, "full": "https://big.example/" + BIG}
    big["title"] = BIG
    main.append(big)
    main.close()

    other = AuditLog(template, instance_id="gw-b", version="test", clock=FakeClock(START + 90))
    other.open()
    for i in range(5):
        other.append(
            fetch_record(
                300 + i, client={"id": "xsearch-agent"}, destination={"domain": "x.example"}
            )
        )
    other.close()

    tampered = AuditLog(template, instance_id="gw-c", version="test", clock=FakeClock(START + 600))
    tampered.open()
    for i in range(4):
        tampered.append(denied(400 + i, client={"id": "coding-agent"}))
    tampered.close()
    path = folder / "gateway-gw-c.jsonl"
    lines = read_lines(path)
    record = orjson.loads(lines[2])
    record["policy"]["decision"] = "allow"  # an attacker turning a refusal into a pass
    lines[2] = orjson.dumps(record)
    write_lines(path, lines)
    return {
        "template": template,
        "hostile": hostile,
        "reload_policy": "research-v2",
        "signing_key": str(private_key),
    }


KINDS_QUERY = "rust async runtimes compared"


def write_kinds_chain(template: str) -> None:
    """Chain gw-k, by the gateway's own record builders: a search (a query and no URL), a
    proxy client's probe without credentials and then a wrong one, a tunnel and its close, a
    malformed tool call, a request the proxy's reader refused before any client was known,
    and a fetch whose content had marker look-alikes neutralised."""
    policy = make_policy()
    ctx = CallContext(policy=policy, client_id="research-agent")
    allowed = Decision(True, None, "domains.allow[0]", policy.name, policy.sha256)
    log = AuditLog(template, instance_id="gw-k", version="test", clock=FakeClock(START + 5000))
    log.open()
    log.append(
        tool_record("WebSearch", ctx, decision=allowed, search={"query": KINDS_QUERY, "results": 3})
    )
    for message, claimed in (
        ("proxy credentials required: send Proxy-Authorization: Basic", None),
        ("unknown client id or token", "research-agent"),
    ):
        log.append(
            auth_failure_record(
                transport="proxy",
                message=message,
                client_hint=claimed,
                source=("127.0.0.1", 40000),
                request_id=None,
            )
        )
    tunnel = new_event_id()
    destination = {"domain": "tunnel.example", "ip": "127.0.0.1", "port": 443}
    log.append(
        proxy_record(
            "proxy_connect",
            event_id=tunnel,
            duration_ms=1,
            client_id="research-agent",
            policy=policy,
            decision=allowed,
            url="tunnel.example:443",
            destination=destination,
            method="CONNECT",
            status=200,
            request_id=tunnel,
        )
    )
    log.append(
        tunnel_close_record(
            event_id=tunnel,
            client_id="research-agent",
            policy=policy,
            end="client_closed",
            duration_ms=30,
            bytes_up=500,
            bytes_down=9000,
            destination=destination,
        )
    )
    log.append(
        refusal_record(
            "WebFetch", ctx, InvalidRequestError("prompt: unknown field (known: url)"), url=None
        )
    )
    unparsed = new_event_id()
    refused = proxy_record(
        "proxy_http",
        event_id=unparsed,
        duration_ms=0,
        client_id=None,
        policy=None,
        decision=None,
        error=GatewayError("a request line must end in HTTP/1.1", reason="bad_request"),
        source=("127.0.0.1", 40001),
        status=400,
        request_id=unparsed,
    )
    refused["error"]["code"] = "bad_request"
    log.append(refused)
    log.append(
        tool_record(
            "WebFetch",
            ctx,
            decision=allowed,
            url={"original": "https://injected.example/", "full": "https://injected.example/"},
            destination={"domain": "injected.example", "ip": "127.0.0.1", "port": 443},
            sanitized={"marker_lookalikes": 3, "invisible_chars": 7},
        )
    )
    log.close()
