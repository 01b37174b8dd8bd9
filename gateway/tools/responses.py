"""JSON Schemas of the tools' and endpoints' response bodies (CONTRACT 5), for `/openapi.json`.

The request schemas live in `tools/schema.py`; these describe what comes back. They name
every field the contract promises and its type, and leave room for additions (no
`additionalProperties: false`), so a client generated from them keeps working.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_NULLABLE_STR = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def _object(required: list[str], **properties: Any) -> Schema:
    return {"type": "object", "required": required, "properties": properties}


ERROR = _object(
    ["error"],
    error=_object(
        ["code", "message", "reason", "rule", "request_id"],
        code={
            "type": "string",
            "enum": [
                "invalid_request",
                "unauthorized",
                "policy_denied",
                "tool_disabled",
                "not_found",
                "wrong_method",
                "request_too_large",
                "rate_limited",
                "response_too_large",
                "upstream_unreachable",
                "upstream_error",
                "unavailable",
                "upstream_timeout",
                "internal_error",
            ],
        },
        message=_STR,
        reason=_NULLABLE_STR,
        rule=_NULLABLE_STR,
        request_id=_NULLABLE_STR,
    ),
)

POLICY_SUMMARY = _object(
    ["name", "sha256", "mode", "rule"],
    name=_STR,
    sha256=_STR,
    mode={"type": "string", "enum": ["enforce", "report"]},
    rule=_NULLABLE_STR,
)

SANITIZED = _object(
    ["marker_lookalikes", "invisible_chars"], marker_lookalikes=_INT, invisible_chars=_INT
)

DSSE = {
    **_object(
        ["payloadType", "payload", "signatures"],
        payloadType={"type": "string", "const": "application/vnd.gateway.envelope.v1+json"},
        payload={"type": "string", "contentEncoding": "base64"},
        signatures={
            "type": "array",
            "items": _object(["keyid", "sig"], keyid=_STR, sig=_STR),
        },
    ),
    "description": "Present when the gateway has a signing key: a DSSE envelope over the "
    "exact JSON bytes of `envelope` (verify with GET /v1/keys or `gateway verify`).",
}

_ENVELOPE_COMMON = {
    "v": {"type": "integer", "const": 1},
    "id": _STR,
    "tool": _STR,
    "client": _NULLABLE_STR,
    "fetched_at": _STR,
    "content_sha256": _HEX64,
    "policy": POLICY_SUMMARY,
    "trust": {"type": "string", "const": "untrusted"},
    "marker": {"type": "string", "pattern": "^[0-9a-f]{24,}$"},
    "sanitized": SANITIZED,
}

WRAPPED = {
    "type": "string",
    "description": "Untrusted text between <<<UNTRUSTED_WEB_CONTENT nonce=… source=…>>> and "
    "<<<END_UNTRUSTED_WEB_CONTENT nonce=…>>> lines (CONTRACT 5.5).",
}

FETCH_RESPONSE = _object(
    ["envelope", "title", "headings", "content"],
    envelope=_object(
        ["v", "id", "tool", "final_url", "status", "content_sha256", "marker", "policy"],
        **_ENVELOPE_COMMON,
        requested_url=_STR,
        requested_id=_STR,
        final_url=_STR,
        redirects={"type": "array", "items": _object(["status", "url"], status=_INT, url=_STR)},
        status=_INT,
        content_type=_NULLABLE_STR,
        body_bytes=_INT,
        body_sha256=_HEX64,
        extract_mode=_STR,
        start_index=_INT,
        chars=_INT,
        total_chars=_INT,
        truncated=_BOOL,
        cached=_BOOL,
    ),
    title={"anyOf": [WRAPPED, {"type": "null"}]},
    headings={"type": "array", "items": _object(["level", "text"], level=_INT, text=WRAPPED)},
    content=WRAPPED,
    dsse=DSSE,
)

_RESULT_POLICY = _object(
    ["decision", "reason", "rule"], decision=_STR, reason=_NULLABLE_STR, rule=_NULLABLE_STR
)

SEARCH_RESPONSE = _object(
    [
        "query",
        "provider",
        "providers_tried",
        "warnings",
        "cached",
        "freshness_applied",
        "query_rewritten",
        "query_year",
        "freshness_auto_inferred",
        "deduped",
        "filtered",
        "results",
        "envelope",
    ],
    query=_STR,
    provider=_NULLABLE_STR,
    providers_tried={"type": "array", "items": _STR},
    warnings={"type": "array", "items": _STR},
    cached=_BOOL,
    freshness_applied=_BOOL,
    query_rewritten=_BOOL,
    query_year=_NULLABLE_INT,
    freshness_auto_inferred=_BOOL,
    deduped=_INT,
    filtered=_object([], policy=_INT, domains=_INT),
    results={
        "type": "array",
        "items": _object(
            ["id", "title", "url", "snippet", "domain", "published_at"],
            id=_STR,
            title=WRAPPED,
            url=_STR,
            snippet=WRAPPED,
            domain=_NULLABLE_STR,
            published_at=_NULLABLE_STR,
            policy=_RESULT_POLICY,
        ),
    },
    envelope=_object(["v", "id", "tool", "content_sha256", "marker", "policy"], **_ENVELOPE_COMMON),
    dsse=DSSE,
)

RESEARCH_RESPONSE = _object(
    ["search", "pages"],
    search=SEARCH_RESPONSE,
    pages={
        "type": "array",
        "items": {
            "anyOf": [
                {**FETCH_RESPONSE, "properties": {**FETCH_RESPONSE["properties"], "rank": _INT}},
                _object(
                    ["url", "rank", "error"],
                    url=_STR,
                    rank=_INT,
                    error=_object(
                        ["code", "message"], code=_STR, message=_STR, reason=_NULLABLE_STR
                    ),
                ),
            ]
        },
    },
)

X_SEARCH_RESPONSE = _object(
    ["envelope", "text", "citations", "provider", "backend", "model", "diagnostics"],
    envelope=_object(
        ["v", "id", "tool", "provider", "backend", "model", "content_sha256", "marker"],
        **_ENVELOPE_COMMON,
        provider={"type": "string", "const": "xai"},
        backend={"type": "string", "const": "x_search"},
        model=_STR,
        chars=_INT,
        citations=_INT,
        citations_sha256=_HEX64,
        filtered=_object(["policy"], policy=_INT),
    ),
    text={**WRAPPED, "description": WRAPPED["description"] + ' source="x_search".'},
    citations={
        "type": "array",
        "items": _object(
            ["url", "title", "start_index", "end_index"],
            url=_STR,
            title=_NULLABLE_STR,
            start_index={
                **_NULLABLE_INT,
                "description": "Code point offset into the unwrapped, sanitised text; null "
                "for a source the answer consulted but does not cite inline.",
            },
            end_index={**_NULLABLE_INT, "description": "Exclusive end, in code points."},
            policy={**_RESULT_POLICY, "description": "Only with results: mark."},
        ),
    },
    provider={"type": "string", "const": "xai"},
    backend={"type": "string", "const": "x_search"},
    model=_STR,
    diagnostics=_object(
        ["request_id", "latency_ms", "server_side_tool_calls"],
        request_id=_NULLABLE_STR,
        latency_ms=_INT,
        status=_NULLABLE_STR,
        server_side_tool_calls={"type": "object", "additionalProperties": _INT},
        server_side_tools_used=_INT,
        offset_unit={"type": ["string", "null"], "enum": ["code_points", "utf16", "utf8", None]},
        unsourced=_BOOL,
    ),
    dsse=DSSE,
)

EXPLAIN_RESPONSE = _object(
    ["url", "decision", "reason", "rule", "enforced", "policy"],
    url=_STR,
    decision={"type": "string", "enum": ["allow", "deny"]},
    reason=_NULLABLE_STR,
    rule=_NULLABLE_STR,
    enforced=_BOOL,
    message=_NULLABLE_STR,
    policy=_object(["name", "sha256"], name=_STR, sha256=_STR),
    addresses={"type": "array", "items": _STR},
)

STATUS_RESPONSE = _object(
    ["version", "uptime_s", "policy"],
    version=_STR,
    instance=_STR,
    uptime_s={"type": "number"},
    started_at=_STR,
    client={"type": ["object", "null"]},
    policy={"type": "object"},
    audit={"type": "object"},
    draining=_BOOL,
)

KEYS_RESPONSE = _object(
    ["keys"],
    keys={
        "type": "array",
        "items": _object(
            ["keyid", "alg", "public_key", "status", "not_before", "not_after"],
            keyid=_HEX64,
            alg={"type": "string", "const": "ed25519"},
            public_key={"type": "string", "contentEncoding": "base64"},
            status={"type": "string", "enum": ["active", "retired"]},
            not_before=_NULLABLE_STR,
            not_after=_NULLABLE_STR,
        ),
    },
)

HEALTH_RESPONSE = _object(["status"], status=_STR)

# Tool name -> the body its HTTP endpoint (and MCP's structuredContent) returns.
TOOL_RESPONSES: dict[str, Schema] = {
    "WebFetch": FETCH_RESPONSE,
    "WebSearch": SEARCH_RESPONSE,
    "Research": RESEARCH_RESPONSE,
    "XSearch": X_SEARCH_RESPONSE,
}
