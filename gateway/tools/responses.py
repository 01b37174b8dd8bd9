"""JSON Schemas of the tools' and endpoints' response bodies, for `/openapi.json`.

The request schemas live in `tools/schema.py`; these describe what comes back, exactly: every
field the code always writes is required, and no object admits a field the code does not
write (`additionalProperties: false`), so a field that goes missing, or one added without
being documented here, fails the conformance tests that validate real responses.
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
_TIME = {"type": "string", "description": "UTC, ISO 8601"}
_NULLABLE_TIME = {"type": ["string", "null"], "description": "UTC, ISO 8601"}


def _object(required: list[str], **properties: Any) -> Schema:
    """A closed object: `required` always present, nothing beyond `properties`."""
    missing = set(required) - set(properties)
    if missing:
        raise ValueError(f"required but not described: {sorted(missing)}")
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


def _const(value: str) -> Schema:
    return {"type": "string", "const": value}


ERROR_CODES = [
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
]

ERROR = _object(
    ["error"],
    error=_object(
        ["code", "message", "reason", "rule", "request_id"],
        code={"type": "string", "enum": ERROR_CODES},
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
    "client": _NULLABLE_STR,
    "fetched_at": _TIME,
    "content_sha256": _HEX64,
    "policy": POLICY_SUMMARY,
    "trust": _const("untrusted"),
    "marker": {"type": "string", "pattern": "^[0-9a-f]{24,}$"},
    "sanitized": SANITIZED,
}
_ENVELOPE_REQUIRED = list(_ENVELOPE_COMMON)

WRAPPED = {
    "type": "string",
    "description": "Untrusted text between <<<UNTRUSTED_WEB_CONTENT nonce=… source=…>>> and "
    "<<<END_UNTRUSTED_WEB_CONTENT nonce=…>>> lines.",
}

FETCH_ENVELOPE = _object(
    [
        *_ENVELOPE_REQUIRED,
        "tool",
        "requested_url",
        "final_url",
        "redirects",
        "status",
        "content_type",
        "body_bytes",
        "body_sha256",
        "extract_mode",
        "start_index",
        "chars",
        "total_chars",
        "truncated",
        "cached",
    ],
    **_ENVELOPE_COMMON,
    tool=_const("WebFetch"),
    requested_url=_STR,
    requested_id={**_STR, "description": 'Only for a url given as "id:<id>".'},
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
)

_FETCH_FIELDS = {
    "envelope": FETCH_ENVELOPE,
    "title": {"anyOf": [WRAPPED, {"type": "null"}]},
    "description": {
        "anyOf": [WRAPPED, {"type": "null"}],
        "description": "The page's meta description, else its OpenGraph one; null when none.",
    },
    "headings": {"type": "array", "items": _object(["level", "text"], level=_INT, text=WRAPPED)},
    "extraction": {
        **_object(["main_content"], main_content=_BOOL, note=_STR),
        "description": "HTML pages only (absent for raw and other bodies): whether main "
        "content was found; when not, `note` says why and `content` holds what text there is.",
    },
    "content": WRAPPED,
    "dsse": DSSE,
}
FETCH_RESPONSE = _object(
    ["envelope", "title", "description", "headings", "content"],
    **_FETCH_FIELDS,
    next_start_index={
        **_INT,
        "description": "Only when the envelope says truncated: the start_index that reads on "
        "(start_index + chars).",
    },
    notes={
        "type": "array",
        "items": _STR,
        "description": "Only when the call had arguments the gateway accepts and ignores (such "
        "as prompt): what each one did not do.",
    },
)

_RESULT_POLICY = _object(
    ["decision", "reason", "rule"],
    decision=_const("deny"),
    reason=_NULLABLE_STR,
    rule=_NULLABLE_STR,
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
        "answer",
        "query_sent",
        "time_range_applied",
        "total",
        "provider_switched",
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
    filtered=_object(["policy", "domains"], policy=_INT, domains=_INT),
    results={
        "type": "array",
        "items": _object(
            ["id", "title", "url", "snippet", "domain", "published_at", "score"],
            id=_STR,
            title=WRAPPED,
            url=_STR,
            snippet=WRAPPED,
            domain=_NULLABLE_STR,
            published_at=_NULLABLE_STR,
            policy={**_RESULT_POLICY, "description": "Only with results: mark, on a denied one."},
            score={
                "type": ["number", "null"],
                "description": "The provider's relevance score where it gives one (Tavily, "
                "SearXNG, Tencent WSA), the fused score when several phrasings were merged; "
                "else null.",
            },
            also_at={
                "type": "array",
                "items": _STR,
                "description": "Only when near-duplicates (the same page elsewhere, a mirror, "
                "a syndicated copy) were merged into this result: their URLs that the policy "
                "allows, best first.",
            },
        ),
    },
    queries={
        "type": "array",
        "items": _STR,
        "description": "Only when the request gave queries: every phrasing searched.",
    },
    answer={
        "type": ["string", "null"],
        "description": "The answering provider's own answer, wrapped as untrusted, with "
        "links the policy denies removed: a model-native provider's prose (openai, "
        "anthropic), Tavily's answer, Serper's answer box; null otherwise.",
    },
    query_sent={
        **_STR,
        "description": "The text the answering provider was sent, after any rewrite (the "
        "first phrasing's, with queries).",
    },
    time_range_applied={
        "oneOf": [
            _object(["start", "end"], start=_STR, end=_STR),
            {"type": "null"},
        ],
        "description": "The dates (YYYY-MM-DD) the answering provider really filtered by; "
        "null when it filtered by none.",
    },
    total={
        **_NULLABLE_INT,
        "description": "The provider's estimate of how many results exist, where it gives "
        "one (Bing, Bocha); else null.",
    },
    provider_switched={
        **_BOOL,
        "description": "True when a later provider of the chain answered (an earlier one "
        "failed, was cooling or had nothing).",
    },
    envelope=_object(
        [*_ENVELOPE_REQUIRED, "tool", "query", "provider", "results", "cached"],
        **_ENVELOPE_COMMON,
        tool=_const("WebSearch"),
        query=_STR,
        provider=_NULLABLE_STR,
        results=_INT,
        cached=_BOOL,
        answer_sha256={**_HEX64, "description": "With an answer: of its text as wrapped."},
    ),
    dsse=DSSE,
)

RESEARCH_PAGE = _object(
    ["envelope", "title", "description", "headings", "content", "rank"], **_FETCH_FIELDS, rank=_INT
)
RESEARCH_FAILED_PAGE = _object(
    ["url", "rank", "error"],
    url=_STR,
    rank=_INT,
    error=_object(
        ["code", "message", "reason"],
        code={"type": "string", "enum": ERROR_CODES},
        message=_STR,
        reason=_NULLABLE_STR,
    ),
)
_NULLABLE_WRAPPED = {"anyOf": [WRAPPED, {"type": "null"}]}
RESEARCH_PASSAGE = _object(
    ["text", "url", "title", "heading", "rank", "score", "page_index", "char_start", "char_end"],
    text=WRAPPED,
    url=_STR,
    title=_NULLABLE_WRAPPED,
    heading=_NULLABLE_WRAPPED,
    rank={"type": "integer", "minimum": 1},
    score={"type": "number", "description": "BM25 against the query; higher is better."},
    page_index={"type": "integer", "minimum": 0, "description": "Index into `pages`."},
    char_start={
        "type": "integer",
        "minimum": 0,
        "description": "Code points into the page's whole extracted text in the call's "
        "extract_mode (the page's content, unwrapped, before max_page_length cuts it): "
        "text[char_start:char_end] is the passage.",
    },
    char_end={"type": "integer", "minimum": 0},
)
RESEARCH_ENVELOPE = _object(
    [*_ENVELOPE_REQUIRED, "tool", "query", "search_envelope", "pages", "passages"],
    **_ENVELOPE_COMMON,
    tool=_const("Research"),
    query=_STR,
    search_envelope={**_STR, "description": "The id of the search's envelope."},
    pages={
        "type": "array",
        "items": _NULLABLE_STR,
        "description": "Each page's envelope id (null for a page that failed), as in `pages`.",
    },
    passages=_INT,
)
RESEARCH_RESPONSE = _object(
    ["search", "pages", "note", "cached"],
    search=SEARCH_RESPONSE,
    cached={
        **_BOOL,
        "description": "True when this is a repeat within search.cache_ttl, answered from "
        "the cache with the first answer (its envelopes and signatures as they were made).",
    },
    note={
        **_STR,
        "description": "One line: which pages were read, and why any chosen page was not.",
    },
    pages={"type": "array", "items": {"oneOf": [RESEARCH_PAGE, RESEARCH_FAILED_PAGE]}},
    passages={
        "type": "array",
        "items": RESEARCH_PASSAGE,
        "description": "With answer_with: passages (the default): best first, across pages.",
    },
    envelope={**RESEARCH_ENVELOPE, "description": "With passages: covers them."},
    dsse=DSSE,
)

X_SEARCH_RESPONSE = _object(
    ["envelope", "text", "citations", "provider", "backend", "model", "diagnostics"],
    envelope=_object(
        [
            *_ENVELOPE_REQUIRED,
            "tool",
            "provider",
            "backend",
            "model",
            "chars",
            "citations",
            "citations_sha256",
            "filtered",
        ],
        **_ENVELOPE_COMMON,
        tool=_const("XSearch"),
        provider=_const("xai"),
        backend=_const("x_search"),
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
            policy={
                **_object(
                    ["decision", "reason", "rule", "enforced"],
                    decision=_const("deny"),
                    reason=_STR,
                    rule=_STR,
                    enforced=_BOOL,
                ),
                "description": "A denied citation kept by results: mark, or one report mode "
                "let pass (enforced false).",
            },
        ),
    },
    provider=_const("xai"),
    backend=_const("x_search"),
    model=_STR,
    diagnostics=_object(
        [
            "request_id",
            "latency_ms",
            "status",
            "server_side_tool_calls",
            "server_side_tools_used",
            "offset_unit",
            "unsourced",
        ],
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
    ["url", "decision", "reason", "rule", "enforced", "message", "hint", "policy"],
    url=_STR,
    decision={"type": "string", "enum": ["allow", "deny"]},
    reason=_NULLABLE_STR,
    rule=_NULLABLE_STR,
    enforced=_BOOL,
    message={
        "type": ["string", "null"],
        "description": "A refusal (or report mode's would-be refusal) as the agent is shown "
        "it: the decision, the rule's own message and the hint; null for an allow.",
    },
    hint={
        "type": ["string", "null"],
        "description": "How to allow it ('to allow it, …'), or 'never allowed: …' when no "
        "policy change can; null for an allow.",
    },
    policy=_object(["name", "sha256"], name=_STR, sha256=_STR),
    addresses={
        "type": "array",
        "items": _STR,
        "description": "Only when resolving was asked and the name was allowed.",
    },
    lookup_error={
        "type": "string",
        "description": "Only when resolving was asked and the lookup failed: why. The "
        "decision is then deny with reason upstream_unreachable and rule resolve, as a fetch "
        "would be refused.",
    },
    dlp={
        **_object(
            ["detector", "location", "fingerprint"], detector=_STR, location=_STR, fingerprint=_STR
        ),
        "description": "Only when outbound data-loss prevention found something in the URL: "
        "which detector, where (never the data itself), and the keyed fingerprint.",
    },
)

_PROVIDER_STATUS = _object(
    [
        "id", "kind", "state", "cooling_until", "consecutive_failures", "last_error", "host",
        "retries", "backoff_ms",
    ],
    id=_STR,
    kind=_STR,
    host={**_STR, "description": "The host (and port, when not the default) of its base URL."},
    retries=_INT,
    backoff_ms={**_INT, "description": "The base of its exponential backoff."},
    model={**_STR, "description": "Only for a model-native provider: the model asked."},
    state={"type": "string", "enum": ["untested", "healthy", "degraded", "cooling"]},
    cooling_until=_NULLABLE_TIME,
    consecutive_failures=_INT,
    last_error=_NULLABLE_STR,
    key_missing={
        "type": "array",
        "items": _STR,
        "description": "Only for a provider whose key is not set: the environment variables "
        "that should hold it. Such a provider is never asked.",
    },
)

STATUS_RESPONSE = _object(
    [
        "version",
        "instance",
        "uptime_s",
        "started_at",
        "client",
        "policy",
        "audit",
        "draining",
        "search",
    ],
    version=_STR,
    instance=_STR,
    uptime_s={"type": "number"},
    started_at=_TIME,
    client={"anyOf": [_object(["id"], id=_STR), {"type": "null"}]},
    policy=_object(
        ["name", "sha256", "mode", "loaded_at", "last_reload", "reload_ok", "problems"],
        name=_STR,
        sha256=_STR,
        mode={"type": "string", "enum": ["enforce", "report"]},
        loaded_at=_TIME,
        last_reload=_NULLABLE_TIME,
        reload_ok=_BOOL,
        problems={"type": "array", "items": _STR},
    ),
    audit=_object(
        ["path", "seq", "head", "signing", "keyid", "last_checkpoint", "healthy", "error"],
        path=_STR,
        seq=_INT,
        head=_NULLABLE_STR,
        signing=_BOOL,
        keyid=_NULLABLE_STR,
        last_checkpoint={"type": ["object", "null"]},
        healthy=_BOOL,
        error=_NULLABLE_STR,
    ),
    draining=_BOOL,
    search=_object(
        ["providers", "cache", "config"],
        providers={"type": "array", "items": _PROVIDER_STATUS},
        config=_object(
            ["chain", "timeout", "deadline", "cache_ttl", "weights", "region_providers",
             "prefer"],
            chain={"type": "string", "enum": ["configured", "automatic"],
                   "description": "automatic: no search.providers, the chain follows the keys "
                   "set."},
            timeout={"type": "number"},
            deadline={"type": "number"},
            cache_ttl={"type": "number"},
            weights={"type": "object", "additionalProperties": {"type": "number"}},
            region_providers={"type": "object",
                              "additionalProperties": {"type": "array", "items": _STR}},
            prefer=_NULLABLE_STR,
        ),  # fmt: skip
        cache={
            "anyOf": [
                _object(["hits", "misses", "entries"], hits=_INT, misses=_INT, entries=_INT),
                {"type": "null"},
            ]
        },
    ),
    # Sections other parts of the gateway add when they run (status_providers).
    proxy={"type": "object", "description": "With a proxy port."},
    reload={"type": "object", "description": "Under `gateway serve`: file watching."},
    shared_state={"type": "object", "description": "With state.redis."},
)

KEYS_RESPONSE = _object(
    ["keys"],
    keys={
        "type": "array",
        "items": _object(
            ["keyid", "alg", "public_key", "status", "not_before", "not_after"],
            keyid=_HEX64,
            alg=_const("ed25519"),
            public_key={"type": "string", "contentEncoding": "base64"},
            status={"type": "string", "enum": ["active", "retired"]},
            not_before=_NULLABLE_TIME,
            not_after=_NULLABLE_TIME,
        ),
    },
)

HEALTH_RESPONSE = _object(["status"], status=_const("ok"))
READY_RESPONSE = _object(
    ["status"],
    status=_const("ready"),
    degraded={
        "type": "array",
        "items": _STR,
        "description": "Ready, but shared state is down and state.on_failure is open.",
    },
)

# Tool name -> the body its HTTP endpoint (and MCP's structuredContent) returns.
TOOL_RESPONSES: dict[str, Schema] = {
    "WebFetch": FETCH_RESPONSE,
    "WebSearch": SEARCH_RESPONSE,
    "Research": RESEARCH_RESPONSE,
    "XSearch": X_SEARCH_RESPONSE,
}
