"""Every decision record is built around one core: tool calls, proxied requests and tunnels
carry the same event, client, policy and trace blocks, and a record of a request that ended
before any rule decided says `decision: null` whichever transport it came by."""

from __future__ import annotations

import os

from gateway.errors import RateLimitedError
from gateway.policy.engine import Decision, Reason
from gateway.tools.context import CallContext
from gateway.tools.records import (
    new_event_id,
    policy_block,
    proxy_record,
    refusal_record,
    tool_record,
    tunnel_close_record,
)
from tests.policy.conftest import make_policy

POLICY = make_policy()
ALLOWED = Decision(True, None, "domains.allow[0]", POLICY.name, POLICY.sha256)
DENIED = Decision(False, Reason.DOMAIN_DENIED, "domains.deny[1]", POLICY.name, POLICY.sha256)


def test_a_missing_decision_is_null_for_tools_and_the_proxy_alike() -> None:
    error = RateLimitedError("slow down")
    tool = tool_record("WebFetch", CallContext(policy=POLICY), decision=None, error=error)
    proxied = proxy_record(
        "proxy_http",
        event_id=new_event_id(),
        duration_ms=1,
        client_id=None,
        policy=POLICY,
        decision=None,
        error=error,
    )
    expected = {
        "name": POLICY.name,
        "sha256": POLICY.sha256,
        "decision": None,
        "enforced": True,
        "rule": None,
        "reason": None,
    }
    assert tool["policy"] == proxied["policy"] == policy_block(POLICY, None) == expected
    assert tool["event"].keys() == proxied["event"].keys()
    assert tool["event"]["type"] == proxied["event"]["type"] == ["error"]


def test_a_refusal_before_any_decision_says_deny() -> None:
    record = refusal_record("WebFetch", CallContext(policy=POLICY), RateLimitedError("x"))
    assert record["policy"]["decision"] == "deny" and record["event"]["type"] == ["denied"]


def test_a_proxy_record_names_what_went_where() -> None:
    event_id = new_event_id()
    record = proxy_record(
        "proxy_http",
        event_id=event_id,
        duration_ms=3,
        client_id="agent",
        policy=POLICY,
        decision=DENIED,
        denied=True,
        source=("127.0.0.1", 5000),
        url="http://a.example.com/",
        destination={"domain": "a.example.com", "ip": None, "port": 80},
        method="GET",
        status=403,
        request_id=event_id,
    )
    assert record["event"]["outcome"] == "failure" and record["event"]["type"] == ["denied"]
    assert record["policy"]["decision"] == "deny" and record["policy"]["rule"] == "domains.deny[1]"
    assert record["trace"] == {"id": event_id} and record["source"]["port"] == 5000
    assert record["http"] == {"request": {"method": "GET"}, "response": {"status_code": 403}}
    # No policy (a request refused before its client was known): no policy block.
    unknown = proxy_record(
        "proxy_http", event_id=event_id, duration_ms=0, client_id=None, policy=None, decision=None
    )
    assert unknown["policy"] is None


def test_a_tunnel_close_links_to_its_connect_record() -> None:
    event_id = new_event_id()
    record = tunnel_close_record(
        event_id=event_id,
        client_id="agent",
        policy=POLICY,
        end="client_closed",
        duration_ms=10,
        bytes_up=5,
        bytes_down=7,
        destination={"domain": "a.example.com", "ip": "93.184.216.34", "port": 443},
    )
    assert record["event"]["id"] == record["trace"]["id"] == event_id
    assert record["event"]["reason"] == "client_closed" and record["event"]["type"] == ["end"]
    assert record["policy"] == {"name": POLICY.name, "sha256": POLICY.sha256}
    assert (record["source"]["bytes"], record["destination"]["bytes"]) == (5, 7)
    assert ALLOWED.allowed  # the allow case of policy_block is the decision's own dict
    assert policy_block(POLICY, ALLOWED)["rule"] == "domains.allow[0]"


def test_event_ids_are_random_and_never_shared_with_a_forked_child() -> None:
    from gateway.tools.records import new_event_id

    ids = {new_event_id() for _ in range(1000)}  # past one 4 KiB draw of the random source
    assert len(ids) == 1000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    new_event_id()  # the buffer holds unused bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent
        os.write(write, new_event_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32 and child != new_event_id()
