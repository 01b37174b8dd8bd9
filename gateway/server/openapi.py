"""`GET /openapi.json`: OpenAPI 3.1 for every endpoint, generated from the one source.

Request bodies are the registry's schemas (`tools/schema.py`, also MCP's `inputSchema`),
response bodies are `tools/responses.py`, errors are the API's one shape with every
status an endpoint can answer. Tools appear because they are registered, never by hand.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.server.handles import SERVICES, json_response
from gateway.tools import responses
from gateway.tools.registry import ToolSpec
from gateway.tools.schema import EXPLAIN_REQUEST

ERROR_STATUSES = {
    400: "invalid_request: malformed JSON, an unknown field, a value out of range, a URL that "
    "does not parse, an unknown result id",
    401: "unauthorized: a missing or unknown bearer token (once clients are configured)",
    403: "policy_denied or tool_disabled: the caller's policy refused (reason and rule say why)",
    404: "not_found: no such endpoint",
    405: "wrong_method: the endpoint exists but not for this method",
    413: "request_too_large: a body over server.max_body_bytes",
    429: "rate_limited: over the client's limits, or the provider's (Retry-After set)",
    502: "response_too_large, upstream_unreachable or upstream_error",
    503: "unavailable: draining, shared state down, the audit log unwritable, or a tool not "
    "configured (Retry-After set when retrying helps)",
    504: "upstream_timeout: a connect, read or total timeout",
}
TOOL_ERRORS = (400, 401, 403, 413, 429, 502, 503, 504)
JSONRPC_MESSAGE = {
    "type": "object",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"type": "string", "const": "2.0"},
        "id": {"type": ["string", "integer"]},
        "method": {"type": "string"},
        "params": {"type": "object"},
    },
}
JSONRPC_REPLY = {
    "type": "object",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"type": "string", "const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "result": {"type": "object"},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/E{status}"} for status in statuses}


def _operation(
    summary: str,
    ok: dict[str, Any],
    errors: tuple[int, ...],
    *,
    body: dict[str, Any] | None = None,
    description: str | None = None,
    public: bool = False,
    tag: str = "gateway",
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "responses": {"200": {"description": "OK", "content": _json(ok)}, **_errors(*errors)},
    }
    if description:
        operation["description"] = description
    if body is not None:
        operation["requestBody"] = {"required": True, "content": _json(body)}
    if public:
        operation["security"] = []
    return operation


def tool_operation(spec: ToolSpec) -> dict[str, Any]:
    ok = responses.TOOL_RESPONSES.get(spec.name, {"type": "object"})
    operation = _operation(
        spec.name,
        ok,
        TOOL_ERRORS,
        body=spec.input_schema,
        description=spec.description,
        tag="tools",
    )
    operation["operationId"] = spec.name
    return operation


def _mcp_paths() -> dict[str, Any]:
    post = {
        "summary": "Model Context Protocol (Streamable HTTP, stateless, JSON replies)",
        "tags": ["mcp"],
        "operationId": "mcp",
        "description": "JSON-RPC 2.0: initialize, ping, tools/list, tools/call and "
        "notifications. tools/call's structuredContent is the tool's HTTP response body; "
        "refusals are results with isError true. Errors before the JSON-RPC layer (401, "
        "413, 429, 503) carry the API's error in error.data.",
        "requestBody": {
            "required": True,
            "content": _json(
                {"anyOf": [JSONRPC_MESSAGE, {"type": "array", "items": JSONRPC_MESSAGE}]}
            ),
        },
        "responses": {
            "200": {
                "description": "A JSON-RPC reply (or a batch of them)",
                "content": {
                    **_json({"anyOf": [JSONRPC_REPLY, {"type": "array", "items": JSONRPC_REPLY}]}),
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            "202": {"description": "Accepted: only notifications or responses were sent"},
            **{
                str(status): {
                    "description": ERROR_STATUSES[status],
                    "content": _json(JSONRPC_REPLY),
                }
                for status in (400, 401, 413, 429, 503)
            },
        },
    }
    other = {
        "summary": "Not offered: no SSE stream, no sessions",
        "tags": ["mcp"],
        "responses": {"405": {"description": "Use POST", "content": _json(JSONRPC_REPLY)}},
    }
    return {
        "post": post,
        "get": {**other, "operationId": "mcp_get"},
        "delete": {**other, "operationId": "mcp_delete"},
    }


def build_document(tools: list[ToolSpec]) -> dict[str, Any]:
    paths: dict[str, Any] = {spec.path: {"post": tool_operation(spec)} for spec in tools}
    paths["/v1/policy/explain"] = {
        "post": {
            **_operation(
                "Would the caller's policy allow this URL, and by which rule?",
                responses.EXPLAIN_RESPONSE,
                (400, 401, 413, 429, 503),
                body=EXPLAIN_REQUEST,
            ),
            "operationId": "explain",
        }
    }
    paths["/v1/status"] = {
        "get": {
            **_operation(
                "Version, uptime, the caller's policy, providers", responses.STATUS_RESPONSE, (401,)
            ),
            "operationId": "status",
        }
    }
    paths["/v1/keys"] = {
        "get": {
            **_operation(
                "Public keys that verify the responses' DSSE signatures",
                responses.KEYS_RESPONSE,
                (),
                public=True,
            ),
            "operationId": "keys",
        }
    }
    paths["/healthz"] = {
        "get": {
            **_operation("Liveness", responses.HEALTH_RESPONSE, (), public=True),
            "operationId": "healthz",
        }
    }
    paths["/readyz"] = {
        "get": {
            **_operation(
                "Readiness (503 while draining or broken)",
                responses.READY_RESPONSE,
                (503,),
                public=True,
            ),
            "operationId": "readyz",
        }
    }
    paths["/metrics"] = {
        "get": {
            "summary": "Prometheus metrics (text format)",
            "tags": ["gateway"],
            "operationId": "metrics",
            "security": [{"bearer": []}, {}],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **_errors(401),
            },
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "summary": "This document",
            "tags": ["gateway"],
            "operationId": "openapi",
            "security": [],
            "responses": {"200": {"description": "OK", "content": _json({"type": "object"})}},
        }
    }
    paths["/mcp"] = _mcp_paths()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent egress gateway",
            "version": __version__,
            "description": "Policy-enforcing web access for AI agents. Every response carries "
            "X-Request-Id; every error (the router's 404 and 405 included) has the one error "
            "shape, except on /mcp, which answers in JSON-RPC.",
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Required once clients are configured.",
                }
            },
            "schemas": {"Error": responses.ERROR},
            "responses": {
                f"E{status}": {
                    "description": text,
                    "content": _json({"$ref": "#/components/schemas/Error"}),
                }
                for status, text in ERROR_STATUSES.items()
            },
        },
    }


def add_routes(app: web.Application) -> None:
    document = build_document(app[SERVICES].tools.all())

    async def openapi(request: web.Request) -> web.Response:
        return json_response(document)

    app.router.add_get("/openapi.json", openapi)
