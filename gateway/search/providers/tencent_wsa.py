"""Tencent Cloud WSA (联网搜索) `SearchPro`, API 3.0 with TC3-HMAC-SHA256 signing.

POST / on wsa.tencentcloudapi.com with `X-TC-Action: SearchPro`, `X-TC-Version: 2025-05-08`
and a signature over the method, path, the signed headers (`content-type;host;x-tc-action`)
and the body's SHA-256, keyed from the SecretKey and the UTC date of the timestamp
(`tc3_signature`, checked against Tencent's published test vector). The SecretId and the
SecretKey come from the environment variables `secret_id_env` and `secret_key_env`. `site`
becomes `Site` (one domain; more are filtered on the results), a date range or freshness
`FromTime`/`ToTime` in Unix seconds. Results come as `Pages`, each a JSON string of {title,
url, passage, site, date, score}. Every error, the rate limit included, is HTTP 200 with
{"Response": {"Error": {"Code", "Message"}}}.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from typing import Any

import orjson
import yarl

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderSettings, endpoint, settings_adapter
from gateway.search.providers.decoding import (
    MAX_PARSED_RESULTS,
    excerpt,
    failure_for_status,
    load_json_object,
    raw_result,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://wsa.tencentcloudapi.com"
SERVICE = "wsa"
ACTION = "SearchPro"
VERSION = "2025-05-08"
CONTENT_TYPE = "application/json; charset=utf-8"
SIGNED_HEADERS = ("content-type", "host", "x-tc-action")
ALGORITHM = "TC3-HMAC-SHA256"
_FRESHNESS_SECONDS = {Freshness.DAY: 86_400, Freshness.WEEK: 604_800,
                      Freshness.MONTH: 2_592_000, Freshness.YEAR: 31_536_000}  # fmt: skip
_RATE_LIMIT_CODES = ("RequestLimitExceeded", "LimitExceeded")
_SERVER_CODES = ("InternalError", "ServiceUnavailable", "FailedOperation")


def tc3_signature(
    secret_key: str,
    *,
    service: str,
    timestamp: int,
    method: str,
    canonical_uri: str,
    canonical_query: str,
    headers: dict[str, str],
    payload: bytes,
) -> str:
    """The hex TC3-HMAC-SHA256 signature; `headers` are the signed ones, by lower-case name."""
    date = datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d")
    names = sorted(headers)
    canonical_headers = "".join(f"{name}:{headers[name].strip()}\n" for name in names)
    canonical_request = "\n".join(
        [
            method,
            canonical_uri,
            canonical_query,
            canonical_headers,
            ";".join(names),
            hashlib.sha256(payload).hexdigest(),
        ]
    )
    scope = f"{date}/{service}/tc3_request"
    to_sign = "\n".join(
        [ALGORITHM, str(timestamp), scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = _hmac(f"TC3{secret_key}".encode(), date)
    key = _hmac(_hmac(key, service), "tc3_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def build_from_settings(query: SearchQuery, settings: ProviderSettings) -> ProviderRequest:
    body: dict[str, Any] = {"Query": query.query, "Mode": 0}
    if query.wanted_domains:
        body["Site"] = query.wanted_domains[0]
    window = _time_window(query, settings.now)
    if window is not None:
        body["FromTime"], body["ToTime"] = window
    payload = orjson.dumps(body)
    timestamp = int(settings.now or time.time())
    host = _host_header(settings.base_url)
    signed = {"content-type": CONTENT_TYPE, "host": host, "x-tc-action": ACTION.lower()}
    signature = tc3_signature(
        settings.api_key or "",
        service=SERVICE,
        timestamp=timestamp,
        method="POST",
        canonical_uri="/",
        canonical_query="",
        headers=signed,
        payload=payload,
    )
    date = datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d")
    authorization = (
        f"{ALGORITHM} Credential={settings.secret_id or ''}/{date}/{SERVICE}/tc3_request, "
        f"SignedHeaders={';'.join(sorted(signed))}, Signature={signature}"
    )
    return ProviderRequest(
        method="POST",
        url=endpoint(settings.base_url, "/"),
        headers={
            "Content-Type": CONTENT_TYPE,
            "Accept": "application/json",
            "Authorization": authorization,
            "X-TC-Action": ACTION,
            "X-TC-Version": VERSION,
            "X-TC-Timestamp": str(timestamp),
            "X-TC-Language": "zh-CN",
        },
        body=payload,
    )


def applies_time_filter(query: SearchQuery) -> bool:
    return query.has_time_filter


def parse(response: ProviderResponse) -> list[RawResult]:
    failure = failure_for_status(response)
    if failure:
        raise failure
    data = load_json_object(response)
    answer = data.get("Response")
    if not isinstance(answer, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "expected a Response object")
    if isinstance(answer.get("Error"), dict):
        raise _api_error(answer["Error"])
    pages = answer.get("Pages")
    if pages is None:
        return []
    if not isinstance(pages, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "Response.Pages is not a list")
    results = []
    for page in pages[:MAX_PARSED_RESULTS]:
        entry = _page(page)
        if entry is None:
            continue
        found = raw_result(
            entry.get("title"),
            entry.get("url"),
            entry.get("passage"),
            entry.get("date"),
            entry.get("score"),
        )
        if found is not None:
            results.append(found)
    return results


def _page(value: Any) -> dict[str, Any] | None:
    """A page: a JSON string (as documented) or, leniently, an object."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _api_error(error: dict[str, Any]) -> ProviderError:
    code = str(error.get("Code") or "unknown")
    message = f"{excerpt(code, 80)}: {excerpt(error.get('Message') or '', 160)}"
    if code.startswith(_RATE_LIMIT_CODES):
        return ProviderError(ErrorClass.RATE_LIMITED, message)
    if code.startswith(_SERVER_CODES):
        return ProviderError(ErrorClass.SERVER_ERROR, message)
    if code.startswith("AuthFailure"):
        return ProviderError(ErrorClass.HTTP_4XX, f"the key pair was refused ({message})")
    return ProviderError(ErrorClass.HTTP_4XX, message)


def _time_window(query: SearchQuery, now: float) -> tuple[int, int] | None:
    if query.time_range is not None:
        start, end = query.time_range
        first = datetime(start.year, start.month, start.day, tzinfo=UTC)
        last = datetime(end.year, end.month, end.day, tzinfo=UTC)
        return int(first.timestamp()), int(last.timestamp()) + 86_399
    if query.freshness is not None:
        current = int(now or time.time())
        return current - _FRESHNESS_SECONDS[query.freshness], current
    return None


def _host_header(base_url: str) -> str:
    """The Host header the client will send for `base_url` (the port only when not the
    scheme's default), which the signature must cover exactly."""
    url = yarl.URL(base_url)
    host = url.raw_host or ""
    return host if url.is_default_port() else f"{host}:{url.port}"


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


ADAPTER = settings_adapter(
    "tencent_wsa",
    DEFAULT_BASE_URL,
    build_from_settings,
    parse,
    applies_time_filter,
)
