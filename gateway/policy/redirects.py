"""plan_redirect(): the pure redirect planner the fetcher calls at every 3xx.

Only 301, 302, 303, 307 and 308 with exactly one Location are followed; 303, and 301/302
after a POST, become GET. The cap and the downgrade rule are checked first (enforced in every
mode), then the new URL goes through the whole decision from step 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.policy.engine import Decision, Reason, _deny, decide_url
from gateway.policy.model import Policy
from gateway.policy.urls import InvalidURLError, Target, resolve_reference

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class AmbiguousRedirectError(ValueError):
    """A redirect with several Location headers: the upstream is broken or hostile."""


@dataclass(frozen=True, slots=True)
class RedirectPlan:
    decision: Decision
    location: str  # the absolute URL the Location resolved to (or the raw header if it did not)
    target: Target | None  # the next hop, when the decision allows it
    method: str


def plan_redirect(
    policy: Policy,
    current: Target,
    status: int,
    locations: Sequence[str],
    *,
    hops_done: int,
    method: str = "GET",
    tool: str | None = "WebFetch",
) -> RedirectPlan | None:
    """The next hop of a redirect, or None when the response is returned as fetched.

    `hops_done` counts redirects already followed; the hop planned here is number
    `hops_done + 1`, refused when that exceeds `redirects.max`.
    """
    if status not in REDIRECT_STATUSES or not locations:
        return None
    if len(locations) > 1:
        raise AmbiguousRedirectError(f"the upstream sent {len(locations)} Location headers")
    next_method = method.upper()
    if status == 303 or (status in (301, 302) and next_method == "POST"):
        next_method = "GET"
    raw = locations[0]
    invalid: InvalidURLError | None = None
    try:
        absolute = resolve_reference(current, raw)
    except InvalidURLError as exc:
        absolute, invalid = raw, exc
    # The cap comes before the new URL is judged (docs/policy-reference.md, Decisions,
    # step 5), even a broken one.
    if hops_done + 1 > policy.max_redirects:
        decision = _deny(
            policy, Reason.REDIRECT_LIMIT, "redirects.max", detail=f"limit {policy.max_redirects}"
        )
        return RedirectPlan(decision, absolute, None, next_method)
    if invalid is not None:
        decision = _deny(policy, Reason.INVALID_URL, "url", detail=str(invalid))
        return RedirectPlan(decision, raw, None, next_method)
    decision, target = decide_url(policy, absolute, tool=tool, outbound=False)
    if (
        target is not None
        and current.scheme == "https"
        and target.scheme == "http"
        and not policy.allow_downgrade
    ):
        decision = _deny(policy, Reason.REDIRECT_DOWNGRADE, "redirects.allow_downgrade")
    if target is not None:
        absolute = str(target.url)
    return RedirectPlan(decision, absolute, target if decision.allowed else None, next_method)
