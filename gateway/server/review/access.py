"""Who may see the review page: clients with `role: reviewer`, by their bearer token or a
session cookie from the login form; without clients configured, anyone reaching a loopback
listener. An agent's token gets 403. Failed logins are audited like any failed credential.
"""

from __future__ import annotations

import ipaddress
import time

from aiohttp import web

from gateway.errors import UnauthorizedError
from gateway.review.session import SESSION_SECONDS, check_session, issue_session
from gateway.runtime import ClientIdentity, Services
from gateway.server.handles import SERVICES, record_auth_failure

SESSION_COOKIE = "gateway_review"
LOOPBACK_REVIEWER = "(loopback, no clients configured)"
PREFIX = web.AppKey("review_prefix", str)
# Set on a request whose reviewer came by the login form's session cookie: only such a
# visitor has anything to log out of (a bearer header or no clients at all has not).
SESSION = web.RequestKey("review_session", bool)


class LoginNeededError(Exception):
    """No credential: the visitor is sent to the login form."""


class ForbiddenError(Exception):
    """A credential that does not open the review page (403), with the reason shown."""


def services_of(request: web.Request) -> Services:
    return request.config_dict[SERVICES]


def reviewer_of(request: web.Request) -> str:
    """The reviewer's name; raises LoginNeededError, ForbiddenError or UnauthorizedError."""
    services = services_of(request)
    state = services.state
    if not state.auth_required:
        if on_loopback_listener(request):
            return LOOPBACK_REVIEWER
        raise ForbiddenError(
            "with no clients configured, the review page opens only on a loopback listener"
        )
    header = request.headers.get("Authorization")
    if header:
        return _require_reviewer(check_token(request, header=header))
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        reviewers = [(c.id, c.token_sha256) for c in state.clients if c.is_reviewer]
        found = check_session(cookie, reviewers, now=time.time())
        if found is not None:
            request[SESSION] = True
            return found
    raise LoginNeededError


def check_token(
    request: web.Request, *, header: str | None = None, token: str = ""
) -> ClientIdentity:
    """The client of a bearer header or a typed token; an unknown one is audited and raised."""
    services = services_of(request)
    try:
        if header is not None:
            client = services.state.authenticate(header)
            assert client is not None  # clients are configured
            return client
        if not token:
            raise UnauthorizedError("no token given")
        return services.state.client_for_token(token)
    except UnauthorizedError as error:
        record_auth_failure(request, error.message, client_hint=None, transport="review")
        raise


def _require_reviewer(client: ClientIdentity) -> str:
    if not client.is_reviewer:
        raise ForbiddenError(
            f"client {client.id!r} is an agent: the review page needs a client with role: reviewer"
        )
    return client.id


def login(request: web.Request, token: str, response: web.StreamResponse) -> str:
    """Check a typed token and set the session cookie on `response`; the reviewer's id."""
    client = check_token(request, token=token)
    _require_reviewer(client)
    response.set_cookie(
        SESSION_COOKIE,
        issue_session(client.id, client.token_sha256, now=time.time()),
        max_age=SESSION_SECONDS,
        path=request.app[PREFIX] + "/",
        httponly=True,
        secure=request.secure or None,
        samesite="Strict",
    )
    return client.id


def logout(request: web.Request, response: web.StreamResponse) -> None:
    response.del_cookie(SESSION_COOKIE, path=request.app[PREFIX] + "/")


def on_loopback_listener(request: web.Request) -> bool:
    """Whether the request came in on a socket bound to a loopback address."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport else None
    if not sockname:
        return False
    try:
        return ipaddress.ip_address(str(sockname[0]).split("%")[0]).is_loopback
    except ValueError:
        return False
