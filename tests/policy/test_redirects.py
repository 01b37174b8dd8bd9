"""The redirect planner: statuses, Location forms, method rewriting, cap and downgrade."""

from __future__ import annotations

import pytest

from gateway.policy.engine import Reason
from gateway.policy.model import Action
from gateway.policy.redirects import AmbiguousRedirectError, plan_redirect
from gateway.policy.urls import parse_url
from tests.policy.conftest import make_policy

POLICY = make_policy(allow=[".example.com"], max_redirects=2)
HTTPS = parse_url("https://www.example.com/a/b")


@pytest.mark.parametrize("status", [300, 304, 305, 306, 200, 404])
def test_non_redirect_statuses_are_returned_as_fetched(status: int) -> None:
    assert plan_redirect(POLICY, HTTPS, status, ["/x"], hops_done=0) is None


def test_redirect_without_location_is_returned_as_fetched() -> None:
    assert plan_redirect(POLICY, HTTPS, 302, [], hops_done=0) is None


def test_several_locations_are_an_upstream_error() -> None:
    with pytest.raises(AmbiguousRedirectError):
        plan_redirect(POLICY, HTTPS, 302, ["/a", "/b"], hops_done=0)


@pytest.mark.parametrize(
    ("status", "method", "expected"),
    [
        (301, "GET", "GET"),
        (301, "POST", "GET"),
        (302, "POST", "GET"),
        (303, "POST", "GET"),
        (303, "HEAD", "GET"),
        (307, "POST", "POST"),
        (308, "POST", "POST"),
        (302, "HEAD", "HEAD"),
    ],
)
def test_method_rewriting(status: int, method: str, expected: str) -> None:
    plan = plan_redirect(POLICY, HTTPS, status, ["/next"], hops_done=0, method=method)
    assert plan is not None and plan.method == expected


@pytest.mark.parametrize(
    ("location", "allowed", "reason", "rule", "resolved"),
    [
        ("/c", True, None, "domains.allow[0]", "https://www.example.com/c"),
        ("c?x=1", True, None, "domains.allow[0]", "https://www.example.com/a/c?x=1"),
        ("//api.example.com/", True, None, "domains.allow[0]", "https://api.example.com/"),
        ("https://evil.test/", False, Reason.DOMAIN_NOT_ALLOWED, "default", "https://evil.test/"),
        (
            "http://www.example.com/",
            False,
            Reason.REDIRECT_DOWNGRADE,
            "redirects.allow_downgrade",
            "http://www.example.com/",
        ),
        (
            "http://127.0.0.1/",
            False,
            Reason.REDIRECT_DOWNGRADE,
            "redirects.allow_downgrade",
            "http://127.0.0.1/",
        ),
        ("https://[::1]/", False, Reason.IP_LITERAL_NOT_ALLOWED, "default", "https://[::1]/"),
        (
            "https://user@www.example.com/",
            False,
            Reason.INVALID_URL,
            "url",
            "https://user@www.example.com/",
        ),
        (
            "ftp://www.example.com/",
            False,
            Reason.SCHEME_NOT_ALLOWED,
            "schemes",
            "ftp://www.example.com/",
        ),
    ],
)
def test_each_hop_is_decided(location, allowed, reason, rule, resolved) -> None:
    plan = plan_redirect(POLICY, HTTPS, 302, [location], hops_done=0)
    assert plan is not None
    assert (plan.decision.allowed, plan.decision.reason, plan.decision.rule) == (
        allowed,
        reason,
        rule,
    )
    assert plan.location == resolved
    assert (plan.target is not None) is allowed


def test_hop_cap() -> None:
    assert plan_redirect(POLICY, HTTPS, 302, ["/x"], hops_done=1).decision.allowed
    plan = plan_redirect(POLICY, HTTPS, 302, ["/x"], hops_done=2)
    assert (plan.decision.allowed, plan.decision.reason, plan.decision.rule) == (
        False,
        Reason.REDIRECT_LIMIT,
        "redirects.max",
    )


def test_downgrade_allowed_by_policy() -> None:
    policy = make_policy(default=Action.ALLOW, allow_downgrade=True)
    plan = plan_redirect(policy, HTTPS, 301, ["http://www.example.com/"], hops_done=0)
    assert plan is not None and plan.decision.allowed and plan.target is not None
    assert plan.target.scheme == "http"


def test_max_zero_refuses_every_redirect() -> None:
    policy = make_policy(default=Action.ALLOW, max_redirects=0)
    plan = plan_redirect(policy, HTTPS, 301, ["/x"], hops_done=0)
    assert plan is not None and plan.decision.reason is Reason.REDIRECT_LIMIT


def test_cap_is_checked_before_the_new_url() -> None:
    # Contract 3.3 step 5: the cap and downgrade rule first, then the new URL from step 1.
    plan = plan_redirect(POLICY, HTTPS, 302, ["/a\x01b"], hops_done=2)
    assert plan is not None
    assert (plan.decision.reason, plan.location, plan.target) == (
        Reason.REDIRECT_LIMIT,
        "/a\x01b",
        None,
    )
