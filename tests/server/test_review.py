"""The review page over HTTP: who may open it (reviewers by token or session cookie, loopback
without clients, 403 for agents, reviewers' tokens refused everywhere else), its security
headers on every answer, and every hostile string of the seeded log escaped in the raw HTML."""

from __future__ import annotations

import hashlib
import html
import re
from types import SimpleNamespace

import lxml.html
import pytest
from aiohttp.test_utils import make_mocked_request
from markupsafe import escape

from gateway.config import AuditConfig, ClientConfig, ReviewConfig
from gateway.review.timeline import why_no_client
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.server.review.access import SESSION_COOKIE, on_loopback_listener
from gateway.server.review.pages import SECURITY_HEADERS
from tests.conftest import loopback_policy
from tests.review.seed import BIG, KINDS_QUERY, write_folder, write_kinds_chain
from tests.server.conftest import audit_records

AGENT, REVIEWER = "tok-agent", "tok-reviewer"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def seeded(tmp_path):
    return write_folder(tmp_path / "audit")


async def start(aiohttp_client, make_config, write_policy, upstream, seeded, **fields):
    fields.setdefault("review", ReviewConfig(enabled=True))
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        audit=AuditConfig(path=seeded["template"]),
        **fields,
    )
    services = Services(config)
    services.open()
    return await aiohttp_client(make_app(services)), services


@pytest.fixture
async def gateway(aiohttp_client, make_config, write_policy, upstream, seeded):
    clients = (
        ClientConfig(id="research-agent", token_sha256=digest(AGENT)),
        ClientConfig(id="alice", token_sha256=digest(REVIEWER), role="reviewer"),
    )
    client, services = await start(
        aiohttp_client, make_config, write_policy, upstream, seeded, clients=clients
    )
    yield client, services
    await services.close()


@pytest.fixture
async def open_gateway(aiohttp_client, make_config, write_policy, upstream, seeded):
    client, services = await start(aiohttp_client, make_config, write_policy, upstream, seeded)
    yield client
    await services.close()


def assert_secured(response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp


PAGES = [
    "/review/",
    "/review/summary",
    "/review/chains",
    "/review/?decision=deny&client=research-agent",
]


@pytest.mark.parametrize("path", PAGES)
async def test_a_reviewers_token_opens_every_view_with_the_headers(gateway, path) -> None:
    client, _ = gateway
    response = await client.get(path, headers=bearer(REVIEWER))
    assert response.status == 200
    assert response.content_type == "text/html"
    assert_secured(response)
    assert "alice" in await response.text()


async def test_an_agents_token_gets_403_and_no_token_the_login_form(gateway) -> None:
    client, services = gateway
    refused = await client.get("/review/", headers=bearer(AGENT))
    assert refused.status == 403
    assert_secured(refused)
    assert "is an agent" in await refused.text()
    unknown = await client.get("/review/summary", headers=bearer("nope"))
    assert unknown.status == 401
    assert_secured(unknown)
    anonymous = await client.get("/review/chains?x=1", allow_redirects=False)
    assert anonymous.status == 303
    assert anonymous.headers["Location"] == "/review/login?next=%2Freview%2Fchains%3Fx%3D1"
    assert_secured(anonymous)
    failures = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
    assert [r["network"]["application"] for r in failures] == ["review"]


async def test_the_login_form_sets_a_strict_httponly_cookie_with_an_expiry(gateway) -> None:
    client, _ = gateway
    form = await client.get("/review/login?next=/review/summary")
    assert form.status == 200
    assert_secured(form)
    response = await client.post(
        "/review/login",
        data={"token": REVIEWER, "next": "/review/summary"},
        allow_redirects=False,
    )
    assert response.status == 303
    assert response.headers["Location"] == "/review/summary"
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(SESSION_COOKIE + "=")
    for part in ("HttpOnly", "SameSite=Strict", "Max-Age=28800", "Path=/review/"):
        assert part in cookie
    assert "Secure" not in cookie  # plain HTTP here; on TLS the cookie is Secure
    assert REVIEWER not in cookie
    page = await client.get("/review/summary")  # the client's cookie jar sends it back
    assert page.status == 200
    assert "alice" in await page.text()
    logout = await client.get("/review/logout", allow_redirects=False)
    assert logout.status == 303
    client.session.cookie_jar.update_cookies({SESSION_COOKIE: ""})
    assert (await client.get("/review/summary", allow_redirects=False)).status == 303


@pytest.mark.parametrize(
    ("token", "status", "text"),
    [(AGENT, 403, "is an agent"), ("wrong", 401, "Unknown token"), ("", 401, "Unknown token")],
    ids=["agent", "unknown", "empty"],
)
async def test_the_login_form_refuses_agents_and_unknown_tokens(
    gateway, token, status, text
) -> None:
    client, _ = gateway
    response = await client.post("/review/login", data={"token": token}, allow_redirects=False)
    assert response.status == status
    assert text in await response.text()
    assert "Set-Cookie" not in response.headers


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/", "/v1/status", "/review/\\evil"]
)
async def test_login_never_redirects_off_the_review_page(gateway, target) -> None:
    client, _ = gateway
    response = await client.post(
        "/review/login", data={"token": REVIEWER, "next": target}, allow_redirects=False
    )
    assert response.headers["Location"] == "/review/"


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "https://evil.example"}, {"Origin": "null", "Sec-Fetch-Site": "cross-site"}],
    ids=["origin", "fetch-site"],
)
async def test_a_login_posted_from_another_site_is_refused(gateway, headers) -> None:
    client, _ = gateway
    response = await client.post("/review/login", data={"token": REVIEWER}, headers=headers)
    assert response.status == 403
    assert "Set-Cookie" not in response.headers


async def test_a_forged_or_foreign_session_cookie_opens_nothing(gateway) -> None:
    client, _ = gateway
    for value in ("alice.99999999999.deadbeef", "YWxpY2U.4102444800." + "0" * 64, "garbage"):
        client.session.cookie_jar.update_cookies({SESSION_COOKIE: value})
        assert (await client.get("/review/", allow_redirects=False)).status == 303


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/fetch", {"url": "https://example.com/"}),
        ("GET", "/v1/status", None),
        ("POST", "/v1/policy/explain", {"url": "https://example.com/"}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ],
)
async def test_a_reviewers_token_opens_nothing_else(gateway, method, path, body) -> None:
    client, services = gateway
    response = await client.request(method, path, json=body, headers=bearer(REVIEWER))
    assert response.status == 403
    text = await response.text()
    assert "reviewer" in text
    failures = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
    assert failures[-1]["client"]["claimed"] == "alice"


async def test_only_the_login_form_takes_a_post(gateway) -> None:
    client, _ = gateway
    for path in ("/review/", "/review/summary", "/review/record"):
        response = await client.post(path, headers=bearer(REVIEWER))
        assert response.status == 405
        assert_secured(response)
    missing = await client.get("/review/nothing-here", headers=bearer(REVIEWER))
    assert missing.status == 404
    assert_secured(missing)


async def test_without_clients_the_page_opens_on_loopback(open_gateway) -> None:
    response = await open_gateway.get("/review/")
    assert response.status == 200
    assert "loopback" in await response.text()
    assert (await open_gateway.get("/review/login", allow_redirects=False)).status == 303


@pytest.mark.parametrize(
    ("sockname", "expected"),
    [
        (("127.0.0.1", 8080), True),
        (("::1", 8080, 0, 0), True),
        (("10.1.2.3", 8080), False),
        (("192.0.2.7", 80), False),
        (None, False),
    ],
)
def test_loopback_listener_is_read_from_the_socket(sockname, expected) -> None:
    transport = SimpleNamespace(
        get_extra_info=lambda name, default=None: sockname if name == "sockname" else default
    )
    request = make_mocked_request("GET", "/review/", transport=transport)
    assert on_loopback_listener(request) is expected


async def test_disabled_review_is_not_served(
    aiohttp_client, make_config, write_policy, upstream, seeded
) -> None:
    client, services = await start(
        aiohttp_client,
        make_config,
        write_policy,
        upstream,
        seeded,
        review=ReviewConfig(enabled=False),
    )
    try:
        assert (await client.get("/review/")).status == 404
    finally:
        await services.close()


def raw_values(text: str) -> list[str]:
    """What a hostile string would have become had it been inserted unescaped: elements that
    run or load things, event-handler attributes, links anywhere but the page's own views."""
    tree = lxml.html.document_fromstring(text)
    found = [
        el.tag for el in tree.iter("script", "img", "style", "iframe", "object", "embed", "base")
    ]
    found += [el.tag for el in tree.iter("svg") if el.get("id") != "chart"]
    for element in tree.iter():
        if not isinstance(element.tag, str):
            continue
        found += [
            f"{element.tag}@{name}" for name in element.attrib if name.lower().startswith("on")
        ]
        for name in ("href", "src", "action", "formaction"):
            target = element.get(name)
            if target is not None and not target.startswith(("/review/", "?")):
                found.append(f"{element.tag}@{name}={target[:40]}")
    return found


@pytest.mark.parametrize(
    "path", ["/review/", "/review/?limit=200", "/review/summary", "/review/?decision=deny"]
)
async def test_hostile_strings_are_escaped_in_every_view(gateway, seeded, path) -> None:
    client, _ = gateway
    text = await (await client.get(path, headers=bearer(REVIEWER))).text()
    assert raw_values(text) == []
    assert "\u202e" not in text and "\u200b" not in text
    assert 'href="javascript:' not in text and 'href="data:' not in text
    if path.startswith("/review/?"):
        assert "&lt;U+202E&gt;" in text
        assert escape(seeded["hostile"]["script"][:30]) in text


async def test_a_hostile_record_shows_every_field_as_text(gateway, seeded) -> None:
    client, _ = gateway
    timeline = await (await client.get("/review/?rule=rule-img", headers=bearer(REVIEWER))).text()
    link = re.search(r'href="/review/record\?([^"]+)"', timeline)
    assert link is not None
    detail = await client.get(
        "/review/record?" + html.unescape(link.group(1)), headers=bearer(REVIEWER)
    )
    assert detail.status == 200
    assert_secured(detail)
    text = await detail.text()
    assert raw_values(text) == []
    assert escape(seeded["hostile"]["img"]) in text
    for label in ("Redirect chain", "chain.prev", "policy.sha256", "this line&#39;s SHA-256"):
        assert label in text


async def test_a_100kb_value_is_cut_with_the_rest_one_click_away(gateway) -> None:
    client, _ = gateway
    timeline = await (
        await client.get("/review/?domain=big.example", headers=bearer(REVIEWER))
    ).text()
    assert "THE-END-OF-THE-BIG-VALUE" not in timeline
    assert "more characters" in timeline
    assert len(timeline) < 60_000
    link = re.search(r'href="/review/record\?([^"]+)"', timeline)
    detail = await (
        await client.get("/review/record?" + html.unescape(link.group(1)), headers=bearer(REVIEWER))
    ).text()
    assert "<details><summary>show all" in detail
    assert "THE-END-OF-THE-BIG-VALUE" in detail
    assert BIG[:50] in detail


@pytest.mark.parametrize(
    "query",
    [
        "file=../../etc/passwd&offset=0",
        "file=gateway-gw-a.jsonl&offset=5",
        "file=gateway-gw-a.jsonl&offset=x",
        "file=gateway-gw-a.jsonl",
        "file=gateway-gw-a.jsonl.lock&offset=0",
    ],
)
async def test_a_record_outside_the_chains_is_404(gateway, query) -> None:
    client, _ = gateway
    response = await client.get("/review/record?" + query, headers=bearer(REVIEWER))
    assert response.status == 404
    assert_secured(response)


async def test_a_bad_filter_is_a_400_naming_it(gateway) -> None:
    client, _ = gateway
    response = await client.get("/review/?decision=maybe", headers=bearer(REVIEWER))
    assert response.status == 400
    assert "decision: one of" in await response.text()


async def test_the_static_files_are_served_and_nothing_else(gateway) -> None:
    client, _ = gateway
    css = await client.get("/review/static/review.css")
    assert css.status == 200 and css.content_type == "text/css"
    assert (await client.get("/review/static/..%2Fpages.py")).status == 404


def test_a_reviewers_token_is_refused_by_the_proxy() -> None:
    import base64

    from gateway.errors import UnauthorizedError
    from gateway.policy.load import load_default_policy
    from gateway.runtime import ClientIdentity, PolicyState
    from gateway.server.proxy.auth import authenticate_basic

    policy = load_default_policy()
    state = PolicyState(
        policy,
        (
            ClientIdentity(
                "alice", hashlib.sha256(REVIEWER.encode()).digest(), policy, role="reviewer"
            ),
            ClientIdentity("research-agent", hashlib.sha256(AGENT.encode()).digest(), policy),
        ),
    )

    def basic(user: str, token: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()

    assert authenticate_basic(state, basic("research-agent", AGENT)).id == "research-agent"
    with pytest.raises(UnauthorizedError, match="reviewer's token opens the review page only"):
        authenticate_basic(state, basic("alice", REVIEWER))


@pytest.mark.parametrize(
    "name", ["script", "img", "javascript", "data", "rtl", "zero_width", "style", "svg", "template"]
)
async def test_each_hostile_string_is_escaped_in_its_record(gateway, seeded, name) -> None:
    client, _ = gateway
    timeline = await (
        await client.get(f"/review/?rule=rule-{name}", headers=bearer(REVIEWER))
    ).text()
    link = re.findall(r'<a href="/review/record\?([^"]+)" class="detail">', timeline)
    detail = await client.get("/review/record?" + html.unescape(link[0]), headers=bearer(REVIEWER))
    text = await detail.text()
    assert raw_values(text) == []
    value = seeded["hostile"][name]
    pieces = re.split(r"[\u202e\u200b]", value)
    for piece in pieces:
        assert str(escape(piece)) in text
    if len(pieces) > 1:
        assert '<span class="esc">&lt;U+' in text
    if name == "template":
        assert "{{ 7*7 }}{% raw %}" in text  # shown, never evaluated as a template


async def test_login_attempts_are_rate_limited(gateway, monkeypatch) -> None:
    from gateway.config import ClientLimits
    from gateway.server.review import pages

    monkeypatch.setattr(pages, "LOGIN_LIMITS", ClientLimits(requests_per_minute=2))
    client, _ = gateway
    for _ in range(2):
        assert (await client.post("/review/login", data={"token": "wrong"})).status == 401
    refused = await client.post("/review/login", data={"token": REVIEWER}, allow_redirects=False)
    assert refused.status == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "Set-Cookie" not in refused.headers
    assert_secured(refused)


# -- what each record is, and what the page around it offers --------------------------------


@pytest.fixture
async def kinds_gateway(aiohttp_client, make_config, write_policy, upstream, seeded):
    write_kinds_chain(seeded["template"])
    clients = (
        ClientConfig(id="research-agent", token_sha256=digest(AGENT)),
        ClientConfig(id="alice", token_sha256=digest(REVIEWER), role="reviewer"),
    )
    client, services = await start(
        aiohttp_client, make_config, write_policy, upstream, seeded, clients=clients
    )
    yield client
    await services.close()


def cells(page: str, rows: str) -> list[list[str]]:
    """The text of each cell of the rows the XPath `rows` selects."""
    tree = lxml.html.fromstring(page)
    return [
        [" ".join(cell.text_content().split()) for cell in row.xpath("th|td")]
        for row in tree.xpath(rows)
    ]


async def test_the_summary_counts_decisions_apart_from_other_records(kinds_gateway) -> None:
    page = await (await kinds_gateway.get("/review/summary", headers=bearer(REVIEWER))).text()
    kinds = {row[0]: row[1] for row in cells(page, "//table[@id='kinds']//tr")}
    assert kinds["malformed requests"] == "2"  # the unknown field, the proxy's bad request line
    assert kinds["authentication challenges"] == "1"
    assert kinds["authentication failures"] == "1"
    assert kinds["tunnel closes"] == "1"
    tree = lxml.html.fromstring(page)
    sections = {
        section.xpath("h3/a|h3/span")[0].text_content(): section
        for section in tree.xpath("//section[@class='client']")
    }

    def heading(client: str) -> str:
        return " ".join(sections[client].xpath("h3/small")[0].text_content().split())

    assert heading("research-agent").endswith("decision(s), 1 malformed request(s)")
    # The proxy's unreadable request came before any client: its own line, and no decision.
    assert heading("(no client)") == "0 decision(s), 1 malformed request(s)"
    assert not sections["(no client)"].xpath("h3/a")  # no client id to filter the timeline by
    assert ["injected.example", "1", "3", "7"] in cells(page, "//table[@id='signals']/tbody/tr")
    by_decision = [
        int(count)
        for section in sections.values()
        for count in section.xpath(".//table[caption='by decision']//td/text()")
    ]
    assert sum(by_decision) == int(kinds["decisions"])


async def test_the_timeline_shows_a_searchs_query_and_why_a_record_has_no_client(
    kinds_gateway,
) -> None:
    page = await (await kinds_gateway.get("/review/?limit=200", headers=bearer(REVIEWER))).text()
    rows = [row for row in cells(page, "//table[@id='timeline']/tbody/tr") if len(row) == 9]
    [search] = [row for row in rows if row[2] == "WebSearch"]
    assert search[6] == f"query: {KINDS_QUERY}"
    no_client = sorted(row[1] for row in rows if row[1].startswith("no client"))
    assert no_client == [
        "no client: refused before authentication",
        "no client: unauthenticated",
        "no client: unauthenticated (claimed research-agent)",
    ]
    assert all(row[1] != "-" for row in rows)


async def test_log_out_is_offered_only_to_a_logged_in_reviewer(kinds_gateway) -> None:
    by_header = await (await kinds_gateway.get("/review/", headers=bearer(REVIEWER))).text()
    assert "alice" in by_header and "log out" not in by_header
    await kinds_gateway.post("/review/login", data={"token": REVIEWER, "next": "/review/"})
    by_session = await (await kinds_gateway.get("/review/")).text()
    [logout] = lxml.html.fromstring(by_session).xpath("//a[@id='logout']")
    assert logout.text_content() == "log out" and logout.get("href") == "/review/logout"


@pytest.mark.parametrize("path", ["/review/record?file=nothing.jsonl&offset=0", "/review/nope"])
async def test_an_error_page_keeps_the_navigation(kinds_gateway, path) -> None:
    response = await kinds_gateway.get(path, headers=bearer(REVIEWER))
    assert response.status == 404
    assert_secured(response)
    nav = lxml.html.fromstring(await response.text()).xpath("//header/nav/a")
    assert [a.text_content() for a in nav] == ["Timeline", "Summary", "Chains"]


async def test_without_clients_there_is_no_log_out_and_no_client_says_so(open_gateway) -> None:
    page = await (await open_gateway.get("/review/")).text()
    tree = lxml.html.fromstring(page)
    who = tree.xpath("//header/span[@class='who']")[0].text_content()
    assert "loopback, no clients configured" in who
    assert not tree.xpath("//a[@id='logout']") and "log out" not in page
    assert tree.xpath("//header/nav/a")
    record = {"event": {"action": "proxy_http"}, "client": {"id": None}, "policy": None}
    assert why_no_client(record, clients_configured=False) == "no client: no clients configured"


@pytest.mark.parametrize(
    ("decision", "tools"),
    [
        ("auth_challenge", ["auth_failure"]),
        ("auth_failure", ["auth_failure"]),
        ("tunnel_close", ["tunnel_close"]),
        ("malformed_request", ["proxy_http", "WebFetch"]),
        ("allow", None),
    ],
)
async def test_the_decision_column_and_filter_name_what_decided_nothing(
    kinds_gateway, decision, tools
) -> None:
    page = await kinds_gateway.get(
        f"/review/?decision={decision}&limit=200", headers=bearer(REVIEWER)
    )
    assert page.status == 200
    rows = [r for r in cells(await page.text(), "//table[@id='timeline']/tbody/tr") if len(r) == 9]
    assert rows and {row[3] for row in rows} == {decision}
    if tools is not None:
        assert [row[2] for row in rows] == tools
    else:  # a tunnel's close is no second allow
        assert "tunnel_close" not in {row[2] for row in rows}
