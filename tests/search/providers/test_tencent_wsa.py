"""Tencent Cloud WSA SearchPro: TC3-HMAC-SHA256 signing (Tencent's test vector), a fake that
checks every signature it receives, Pages as JSON strings, errors inside HTTP 200."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pytest
from aiohttp import web

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderSettings
from gateway.search.providers.tencent_wsa import ADAPTER, tc3_signature
from gateway.search.query import SearchQuery
from tests.search.conftest import LoopbackTransport

# Tencent's documented example (CVM DescribeInstances), asterisks and all.
DOC_SECRET_KEY = "Gu5t9xGARNpq86cd98joQYCN3*******"
DOC_TIMESTAMP = 1551113065
DOC_BODY = json.dumps(
    {"Limit": 1, "Filters": [{"Values": ["\u672a\u547d\u540d"], "Name": "instance-name"}]}
).encode()
SECRET_ID = "AKIDtestsecretid0123456789"
SECRET_KEY = "test-secret-key-0123456789abcdef"
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def test_signature_matches_tencents_published_vector() -> None:
    headers = {"content-type": "application/json; charset=utf-8", "host": "cvm.tencentcloudapi.com"}
    signature = tc3_signature(
        DOC_SECRET_KEY, service="cvm", timestamp=DOC_TIMESTAMP, method="POST",
        canonical_uri="/", canonical_query="", headers=headers, payload=DOC_BODY,
    )  # fmt: skip
    assert signature == "2230eefd229f582d8b1b891af7107b91597240707d778ab3738f756258d7652c"
    # Signing x-tc-action too, and the WSA form (values computed from the same algorithm).
    with_action = tc3_signature(
        DOC_SECRET_KEY, service="cvm", timestamp=DOC_TIMESTAMP, method="POST",
        canonical_uri="/", canonical_query="",
        headers={**headers, "x-tc-action": "describeinstances"}, payload=DOC_BODY,
    )  # fmt: skip
    assert with_action == "be4f67d323c78ab9acb7395e43c0dbcf822a9cfac32fea2449a7bc7726b770a3"
    wsa = tc3_signature(
        DOC_SECRET_KEY, service="wsa", timestamp=DOC_TIMESTAMP, method="POST",
        canonical_uri="/", canonical_query="",
        headers={"content-type": "application/json; charset=utf-8",
                 "host": "wsa.tencentcloudapi.com", "x-tc-action": "searchpro"},
        payload='{"Query":"腾讯云"}'.encode(),
    )  # fmt: skip
    assert wsa == "eab521eaf3df444b827638a7aec18858ac6f2a40b9b2b97107f390c27874e499"


def test_the_request_is_signed_with_its_own_time_and_body() -> None:
    settings = ProviderSettings("https://wsa.tencentcloudapi.com", SECRET_KEY, SECRET_ID, now=NOW)
    request = ADAPTER.request(SearchQuery("腾讯云", site="qq.com"), settings)
    assert request.url == "https://wsa.tencentcloudapi.com/"
    assert orjson.loads(request.body or b"") == {"Query": "腾讯云", "Mode": 0, "Site": "qq.com"}
    headers = request.headers
    assert (headers["X-TC-Action"], headers["X-TC-Version"]) == ("SearchPro", "2025-05-08")
    assert headers["X-TC-Timestamp"] == str(int(NOW))
    assert headers["Authorization"].startswith(
        f"TC3-HMAC-SHA256 Credential={SECRET_ID}/2026-01-01/wsa/tc3_request, "
        "SignedHeaders=content-type;host;x-tc-action, Signature="
    )


class SigningFake:
    """Checks each request's TC3 signature as Tencent would, then replays `replies`."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(orjson.loads(body))
        match = re.fullmatch(
            r"TC3-HMAC-SHA256 Credential=([^/]+)/(\d{4}-\d\d-\d\d)/wsa/tc3_request, "
            r"SignedHeaders=([a-z;-]+), Signature=([0-9a-f]{64})",
            request.headers.get("Authorization", ""),
        )
        if match is None or match.group(1) != SECRET_ID:
            return web.json_response(error("AuthFailure.SecretIdNotFound", "bad id"))
        signed = {name: request.headers[name] for name in match.group(3).split(";")}
        if "x-tc-action" in signed:
            signed["x-tc-action"] = signed["x-tc-action"].lower()
        expected = tc3_signature(
            SECRET_KEY, service="wsa", timestamp=int(request.headers["X-TC-Timestamp"]),
            method=request.method, canonical_uri=request.path, canonical_query="",
            headers=signed, payload=body,
        )  # fmt: skip
        if expected != match.group(4):
            return web.json_response(error("AuthFailure.SignatureFailure", "signature wrong"))
        return web.json_response(self.replies.pop(0))


def error(code: str, message: str) -> dict[str, Any]:
    return {"Response": {"Error": {"Code": code, "Message": message}, "RequestId": "r-1"}}


PAGES = {
    "Response": {
        "Query": "腾讯云",
        "Pages": [
            json.dumps({"title": "腾讯云 - 产业智变", "date": "2025-03-01 08:00:00",
                        "url": "https://cloud.tencent.com/", "passage": "腾讯云提供<b>云服务</b>",
                        "site": "腾讯云", "score": 0.91, "images": [], "favicon": ""},
                       ensure_ascii=False),
            "not json",
            json.dumps({"title": "No url"}),
        ],
        "Msg": "",
        "RequestId": "4c3e0b6b-1f0a-4b6f-9f5e-0d1c2b3a4f5e",
    }
}  # fmt: skip


@pytest.fixture
async def wsa(aiohttp_server):  # type: ignore[no-untyped-def]
    fake = SigningFake()
    app = web.Application()
    app.router.add_post("/", fake.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    return fake, str(server.make_url("")).rstrip("/")


async def ask(transport: LoopbackTransport, base_url: str, key: str = SECRET_KEY, **fields):  # type: ignore[no-untyped-def]
    settings = ProviderSettings(base_url, key, SECRET_ID, now=NOW)
    request = ADAPTER.request(SearchQuery.from_fields({"query": "腾讯云", **fields}), settings)
    return ADAPTER.parse(await transport.send(request, timeout=5, allow_private=True))


async def test_signed_search_parses_pages(wsa, transport) -> None:  # type: ignore[no-untyped-def]
    fake, base_url = wsa
    fake.replies.append(PAGES)
    results = await ask(transport, base_url, time_range="2025-01-01..2025-01-31")
    assert [(r.title, r.url, r.snippet, r.published_at) for r in results] == [
        (
            "腾讯云 - 产业智变",
            "https://cloud.tencent.com/",
            "腾讯云提供云服务",
            "2025-03-01T08:00:00",
        )
    ]
    assert (fake.bodies[0]["FromTime"], fake.bodies[0]["ToTime"]) == (1735689600, 1738367999)
    assert ADAPTER.applies_time_filter(SearchQuery("q", freshness="day"))


async def test_a_wrong_key_is_refused_by_the_signature_check(wsa, transport) -> None:  # type: ignore[no-untyped-def]
    _, base_url = wsa
    with pytest.raises(ProviderError) as caught:
        await ask(transport, base_url, key="another-key-0123456789")
    assert caught.value.error_class is ErrorClass.HTTP_4XX
    assert "AuthFailure.SignatureFailure" in caught.value.message


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        ("RequestLimitExceeded", ErrorClass.RATE_LIMITED),
        ("InternalError", ErrorClass.SERVER_ERROR),
        ("ResourceNotFound", ErrorClass.HTTP_4XX),
        ("ResourceUnavailable", ErrorClass.HTTP_4XX),
        ("AuthFailure.SignatureExpire", ErrorClass.HTTP_4XX),
    ],
)
async def test_errors_inside_http_200(wsa, transport, code, error_class) -> None:  # type: ignore[no-untyped-def]
    fake, base_url = wsa
    fake.replies.append(error(code, "something"))
    with pytest.raises(ProviderError) as caught:
        await ask(transport, base_url)
    assert caught.value.error_class is error_class and code in caught.value.message
