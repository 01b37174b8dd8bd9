"""Session cookies: who they name, until when, and that nobody else's key makes one."""

from __future__ import annotations

import hashlib

import pytest

from gateway.review.session import SESSION_SECONDS, check_session, issue_session

KEY = hashlib.sha256(b"tok").digest()
OTHER = hashlib.sha256(b"other").digest()
NOW = 1_800_000_000.0


def test_a_session_names_its_reviewer_until_it_expires() -> None:
    value = issue_session("alice", KEY, now=NOW)
    assert check_session(value, [("alice", KEY)], now=NOW + 10) == "alice"
    assert check_session(value, [("alice", KEY)], now=NOW + SESSION_SECONDS + 1) is None


@pytest.mark.parametrize(
    "reviewers",
    [[], [("alice", OTHER)], [("bob", KEY)]],
    ids=["no-reviewers", "token-changed", "other-client"],
)
def test_a_session_ends_when_its_client_or_token_goes(reviewers) -> None:
    assert check_session(issue_session("alice", KEY, now=NOW), reviewers, now=NOW) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a.b.c",
        "YWxpY2U.1800000100." + "0" * 64,
        "!!.1800000100." + "0" * 64,
        "YWxpY2U.99999999999." + "0" * 64,
    ],
)
def test_forged_values_open_nothing(value: str) -> None:
    assert check_session(value, [("alice", KEY)], now=NOW) is None


def test_the_expiry_cannot_be_stretched() -> None:
    name, expires, mac = issue_session("alice", KEY, now=NOW).split(".")
    assert check_session(f"{name}.{int(expires) + 3600}.{mac}", [("alice", KEY)], now=NOW) is None
