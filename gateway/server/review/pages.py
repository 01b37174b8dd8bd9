"""The review page's routes: the timeline, a record, the summaries with the chart, the chains,
login and logout, and the two static files. Only translation: the query goes to
`gateway.review`, whose reading runs in a worker thread (one view at a time, so a reviewer
cannot starve the gateway; summaries and chain verification queue apart), and the result
goes to a template.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

from aiohttp import web
from jinja2 import Environment

from gateway.audit.chain import AuditAction
from gateway.audit.fields import (
    Disposition,
    action_of,
    client_of,
    domain_of,
    format_time,
    int_field,
    is_lifecycle,
    section,
    text_field,
    url_of,
)
from gateway.audit.summary import RecordKind
from gateway.config import ClientLimits
from gateway.errors import RateLimitedError, UnauthorizedError
from gateway.metrics import ACTIONS
from gateway.review.chains import ChainChecker
from gateway.review.chart import STACK, build_chart
from gateway.review.files import AuditFolder
from gateway.review.overview import Overview
from gateway.review.query import (
    DECISION_CHOICES,
    RELOAD_ACTION,
    Query,
    QueryError,
    decision_label,
    parse_query,
)
from gateway.review.record import RecordNotFoundError, read_record
from gateway.review.timeline import Entry, timeline, why_no_client
from gateway.server.handles import SERVICES
from gateway.server.review.access import (
    PREFIX,
    SESSION,
    ForbiddenError,
    LoginNeededError,
    login,
    logout,
    reviewer_of,
    services_of,
)
from gateway.server.review.render import STATIC, make_environment

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# The tool filter's choices: every action the gateway records.
TOOLS = (*sorted(ACTIONS), RELOAD_ACTION, *AuditAction)
# Login attempts of all visitors together (a rolling minute, shared by workers with Redis).
LOGIN_LIMIT_KEY = "(review login)"
LOGIN_LIMITS = ClientLimits(requests_per_minute=30)
STATIC_TYPES = {"review.css": "text/css", "favicon.svg": "image/svg+xml"}
# The summary's heading of requests no client made (refused before any client was known).
NO_CLIENT = "(no client)"
# The records that are not decisions, as the summary names them, each with what it means.
NOT_DECISIONS = (
    (RecordKind.MALFORMED, "malformed requests", "refused for their form, before any rule"),
    (
        RecordKind.AUTH_CHALLENGE,
        "authentication challenges",
        "no credential sent: proxy clients such as git send one only after this 407",
    ),
    (RecordKind.AUTH_FAILURE, "authentication failures", "a credential sent and refused"),
    (RecordKind.TUNNEL_CLOSE, "tunnel closes", "the end of a tunnel counted at its CONNECT"),
)

ENV = web.AppKey("review_env", Environment)
FOLDER = web.AppKey("review_folder", AuditFolder)
OVERVIEW = web.AppKey("review_overview", Overview)
CHECKER = web.AppKey("review_checker", ChainChecker)
WORK = web.AppKey("review_work", asyncio.Semaphore)
SUMMARY_WORK = web.AppKey("review_summary_work", asyncio.Semaphore)
VERIFY_WORK = web.AppKey("review_verify_work", asyncio.Semaphore)
FILES = web.AppKey("review_static", dict)


def build_review_app(parent: web.Application) -> web.Application:
    services = parent[SERVICES]
    audit = services.config.audit
    folder = AuditFolder(audit.path, audit.checkpoints_path)
    keys = [*([services.signer.public_key] if services.signer else []), *services.retired_keys]
    app = web.Application(middlewares=[review_shape])
    app[PREFIX] = "/review"
    app[ENV] = make_environment()
    app[FOLDER] = folder
    app[OVERVIEW] = Overview(folder)
    app[CHECKER] = ChainChecker(
        folder, public_keys=keys, checkpoints_template=audit.checkpoints_path
    )
    app[WORK] = asyncio.Semaphore(1)
    # The first summary of a large folder reads all of it, and verifying a chain takes as
    # long as `audit verify`: each waits in its own queue, so the timeline stays quick.
    app[SUMMARY_WORK] = asyncio.Semaphore(1)
    app[VERIFY_WORK] = asyncio.Semaphore(1)
    app[FILES] = {name: (STATIC / name).read_bytes() for name in STATIC_TYPES}
    app.router.add_get("/", timeline_page)
    app.router.add_get("/record", record_page)
    app.router.add_get("/summary", summary_page)
    app.router.add_get("/chains", chains_page)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login_submit)
    app.router.add_get("/logout", logout_page)
    app.router.add_get("/static/{name}", static_file)
    return app


# -- the shape of every response --------------------------------------------------------------


@web.middleware
async def review_shape(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer, errors included, is HTML with the security headers."""
    try:
        response = await handler(request)
    except LoginNeededError:
        target = request.path_qs if request.method == "GET" else request.app[PREFIX] + "/"
        response = redirect(request.app[PREFIX] + "/login?" + urlencode({"next": target}))
    except ForbiddenError as error:
        response = error_page(request, 403, "Forbidden", str(error))
    except UnauthorizedError as error:
        response = error_page(request, 401, "Unauthorized", error.message, login_link=True)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_page(request, exc.status, exc.reason or "Error", exc.text or "")
    response.headers.update(SECURITY_HEADERS)
    return response


def redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def render(
    request: web.Request, template: str, *, status: int = 200, **context: Any
) -> web.Response:
    context.setdefault("reviewer", None)
    context.setdefault("session", request.get(SESSION, False))
    context.setdefault("view", template.removesuffix(".html"))
    html = request.app[ENV].get_template(template).render(prefix=request.app[PREFIX], **context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def error_page(
    request: web.Request,
    status: int,
    title: str,
    message: str,
    *,
    login_link: bool = False,
    reviewer: str | None = None,
) -> web.Response:
    return render(
        request,
        "error.html",
        status=status,
        title=title,
        message=message,
        login_link=login_link,
        reviewer=reviewer,
    )


async def offload(
    request: web.Request,
    work: Callable[..., T],
    *args: Any,
    queue: web.AppKey[asyncio.Semaphore] = WORK,
) -> T:
    """Run a blocking read in a thread, one at a time per queue."""
    async with request.app[queue]:
        return await asyncio.to_thread(work, *args)


# -- the views --------------------------------------------------------------------------------


async def timeline_page(request: web.Request) -> web.Response:
    reviewer = reviewer_of(request)
    params = {key: request.query.getone(key) for key in request.query}
    problem = None
    try:
        query = parse_query(params)
    except QueryError as error:
        query, problem = Query(), str(error)
    page = await offload(request, timeline, request.app[FOLDER], query)
    services = services_of(request)
    return render(
        request,
        "timeline.html",
        status=400 if problem else 200,
        reviewer=reviewer,
        problem=problem,
        query=query,
        form=params,
        rows=[_row(entry, services.state.auth_required) for entry in page.entries],
        older=urlencode(query.params(before=page.older)) if page.older else None,
        newest=urlencode(query.params(before=None)),
        paged=query.before is not None,
        chains=page.chains,
        files=page.files,
        streamed=request.app[FOLDER].streamed,
        folder=_folder_name(request),
        tools=TOOLS,
        decisions=DECISION_CHOICES,
        clients=[client.id for client in services.state.clients],
    )


def _folder_name(request: web.Request) -> str:
    """The folder's own name: where it sits on the host is the operator's business."""
    return os.path.basename(request.app[FOLDER].folder) + "/"


def _row(entry: Entry, clients_configured: bool) -> dict[str, Any]:
    record = entry.record
    policy = section(record, "policy")
    action = action_of(record) or "-"
    lifecycle = is_lifecycle(record)
    return {
        "time": format_time(entry.timestamp),
        "instance": entry.instance,
        "seq": entry.seq,
        "link": urlencode({"file": entry.file, "offset": entry.offset}),
        "action": action,
        "reload": action == RELOAD_ACTION,
        "lifecycle": lifecycle,
        "client": client_of(record),
        "no_client": why_no_client(record, clients_configured=clients_configured),
        "query": text_field(section(record, "search"), "query"),
        "decision": None if lifecycle or action == RELOAD_ACTION else decision_label(record),
        "outcome": text_field(section(record, "event"), "outcome"),
        "status": int_field(section(section(record, "http"), "response"), "status_code") or None,
        "domain": domain_of(record),
        "url": url_of(record),
        "rule": text_field(policy, "rule"),
        "reason": text_field(policy, "reason") or text_field(section(record, "event"), "reason"),
        "policy": text_field(policy, "name"),
        "policy_sha256": text_field(policy, "sha256"),
    }


async def record_page(request: web.Request) -> web.Response:
    reviewer = reviewer_of(request)
    name = request.query.get("file", "")
    try:
        offset = _number(request.query.get("offset"))
        line = _number(request.query.get("line"))
        if (offset is None) == (line is None):
            raise RecordNotFoundError("give file and either offset or line")
        view = await offload(
            request, lambda: read_record(request.app[FOLDER], name, offset=offset, line=line)
        )
    except RecordNotFoundError as error:
        return error_page(request, 404, "No such record", str(error), reviewer=reviewer)
    record = view.record or {}
    policy = section(record, "policy")
    chain = section(record, "chain")
    return render(
        request,
        "record.html",
        reviewer=reviewer,
        view=view,
        summary=_row(
            Entry(0.0, "", 0, view.file, view.offset, record),
            services_of(request).state.auth_required,
        )
        if view.record
        else None,
        timestamp=record.get("@timestamp"),
        hashes=[
            ("this line's SHA-256 (the next record's chain.prev)", view.line_sha256),
            ("chain.prev (the previous line's SHA-256)", chain.get("prev")),
            ("chain.seq", chain.get("seq")),
            ("hash.sha256 (the body's SHA-256)", section(record, "hash").get("sha256")),
            ("policy.name", policy.get("name")),
            ("policy.sha256", policy.get("sha256")),
        ],
        redirects=view.redirects,
    )


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or len(text) > 18:
        raise RecordNotFoundError("offset and line are whole numbers")
    return int(text)


async def summary_page(request: web.Request) -> web.Response:
    reviewer = reviewer_of(request)
    tally = await offload(request, request.app[OVERVIEW].tally, queue=SUMMARY_WORK)
    clients = []
    for client_id, counts in sorted(
        tally.clients.items(), key=lambda item: (-sum(item[1].decisions.values()), item[0])
    ):
        clients.append(
            {
                "id": client_id if client_id != "-" else NO_CLIENT,
                # The timeline filters by a client id; records without one have none to name.
                "link": urlencode({"client": client_id}) if client_id != "-" else None,
                "total": sum(counts.decisions.values()),
                "malformed": counts.malformed,
                "decisions": [(d.value, counts.decisions.get(d, 0)) for d in Disposition],
                "reasons": counts.reasons.most_common(10),
                "allowed": counts.allowed.most_common(10),
                "refused": counts.refused.most_common(10),
            }
        )
    return render(
        request,
        "summary.html",
        reviewer=reviewer,
        records=tally.records,
        decisions=tally.decisions,
        apart=[(label, tally.kinds.get(kind, 0), note) for kind, label, note in NOT_DECISIONS],
        signals=[
            {
                "domain": domain,
                "records": found.records,
                "marker_lookalikes": found.marker_lookalikes,
                "invisible_chars": found.invisible_chars,
            }
            for domain, found in sorted(
                tally.signals.items(),
                key=lambda item: (-(item[1].marker_lookalikes + item[1].invisible_chars), item[0]),
            )[:20]
        ],
        clients=clients,
        chart=build_chart(tally.buckets, tally.bucket_seconds, tally.reloads),
        stack=[d.value for d in STACK],
        reloads=[
            {
                "time": format_time(r.timestamp),
                "outcome": r.outcome,
                "policy": r.policy,
                "sha256": r.sha256,
            }
            for r in reversed(tally.reloads)
        ],
    )


async def chains_page(request: web.Request) -> web.Response:
    reviewer = reviewer_of(request)
    states = await offload(request, request.app[CHECKER].states, queue=VERIFY_WORK)
    return render(
        request,
        "chains.html",
        reviewer=reviewer,
        states=states,
        streamed=request.app[FOLDER].streamed,
        folder=_folder_name(request),
        keys=len(request.app[CHECKER].public_keys),
    )


# -- login ------------------------------------------------------------------------------------


def _safe_next(request: web.Request, target: str | None) -> str:
    """Only a path of the review page itself: never another site (an open redirect)."""
    prefix = request.app[PREFIX] + "/"
    if target and target.startswith(prefix) and "\\" not in target and "//" not in target:
        return target
    return prefix


async def login_page(request: web.Request) -> web.Response:
    if not services_of(request).state.auth_required:
        return redirect(request.app[PREFIX] + "/")
    return render(
        request, "login.html", next=_safe_next(request, request.query.get("next")), message=None
    )


async def login_submit(request: web.Request) -> web.Response:
    # The page's no-referrer policy makes browsers send `Origin: null`; Sec-Fetch-Site tells
    # a cross-site post apart all the same.
    origin = request.headers.get("Origin")
    site = request.headers.get("Sec-Fetch-Site")
    if (origin not in (None, "null") and origin != f"{request.scheme}://{request.host}") or (
        site is not None and site not in ("same-origin", "none")
    ):
        raise ForbiddenError("the login form was sent from another site")
    try:  # tokens cannot be guessed, but each failure is an audit record: bound them
        lease = await services_of(request).limiter.acquire(LOGIN_LIMIT_KEY, LOGIN_LIMITS)
    except RateLimitedError as error:
        response = error_page(request, 429, "Too many login attempts", error.message)
        response.headers["Retry-After"] = str(max(1, int((error.retry_after or 1) + 0.999)))
        return response
    await lease.release()
    form = await request.post()
    token = form.get("token")
    target = _safe_next(request, str(form.get("next") or ""))
    response = redirect(target)
    try:
        login(request, token if isinstance(token, str) else "", response)
    except UnauthorizedError:
        return render(request, "login.html", status=401, next=target, message="Unknown token.")
    except ForbiddenError as error:
        return render(request, "login.html", status=403, next=target, message=str(error))
    return response


async def logout_page(request: web.Request) -> web.Response:
    response = redirect(request.app[PREFIX] + "/login")
    logout(request, response)
    return response


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC_TYPES:
        raise web.HTTPNotFound(text=f"no file {name[:100]}")
    return web.Response(body=request.app[FILES][name], content_type=STATIC_TYPES[name])
