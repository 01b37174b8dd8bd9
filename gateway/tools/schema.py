"""The one source of the tools' request schemas, and the validator that applies them.

The HTTP API validates bodies with these, MCP lists them as `inputSchema`, and
`/openapi.json` publishes them, so the three cannot drift apart. The validator covers the
JSON Schema subset the schemas use and names the offending field in every error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.errors import InvalidRequestError

Schema = dict[str, Any]

_DOMAIN_LIST = {
    "type": "array",
    "maxItems": 5,
    "items": {"type": "string", "minLength": 1, "maxLength": 253},
}

# Arguments that other agents' own WebFetch tools send, accepted so such a call works and then
# ignored, each with the note the answer carries: Claude Code's WebFetch sends `prompt` (what
# to ask of the page), but the gateway returns the page itself and runs no model over it.
IGNORED_FETCH_ARGUMENTS = {
    "prompt": "prompt was ignored: the gateway returns the page itself and runs no prompt over "
    "it; read the content below to answer it",
}

FETCH_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {
            "type": "string",
            "minLength": 1,
            "maxLength": 8192,
            "description": 'An absolute http(s) URL, or "id:<id>" naming a result of an '
            "earlier WebSearch by the same client.",
        },
        "max_chars": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1_000_000_000,
            "description": "How many characters of text to return (default from the policy, "
            "clamped to the policy's limits.max_chars).",
        },
        "start_index": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1_000_000_000,
            "default": 0,
            "description": "Where to start, in characters of the extracted text: read a long "
            "page in pieces by passing the previous start_index + chars.",
        },
        "extract_mode": {
            "type": "string",
            "enum": ["auto", "markdown", "text", "raw"],
            "default": "auto",
            "description": "auto: HTML as Markdown of the main content, text and JSON as they "
            "are; markdown; text: plain text; raw: the body as received.",
        },
        "prompt": {
            "type": "string",
            "maxLength": 100_000,
            "description": "Accepted and ignored (as other WebFetch tools send it): the page "
            "comes back as it is, with a note saying the prompt was not applied.",
        },
    },
}

MAX_QUERIES = 5
# One of `query` and `queries` is required, and not both: the tool checks it (search_queries),
# since models' tool APIs refuse an input schema with anyOf or oneOf at its top level.

SEARCH_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 2000,
            "description": "The search query (required unless queries is given).",
        },
        "queries": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_QUERIES,
            "items": {"type": "string", "minLength": 1, "maxLength": 2000},
            "description": "Instead of query: up to 5 phrasings of one question (synonyms, "
            "another language, the expected answer's words), searched in parallel and merged "
            "by reciprocal rank fusion.",
        },
        "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 10},
        "provider": {
            "type": "string",
            "minLength": 1,
            "maxLength": 100,
            "description": "Ask only this configured provider (no fallback).",
        },
        "site": {
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
            "description": "Only results from this domain and its subdomains.",
        },
        "include_domains": {
            **_DOMAIN_LIST,
            "description": "Only results from these domains (and subdomains).",
        },
        "exclude_domains": {
            **_DOMAIN_LIST,
            "description": "No results from these domains (and subdomains).",
        },
        "region": {
            "type": "string",
            "minLength": 2,
            "maxLength": 16,
            "description": "Country, then language, as DuckDuckGo writes it: 'us-en', "
            "'cn-zh'; a bare country ('de') searches in its usual language; 'wt-wt' is no "
            "region.",
        },
        "freshness": {"type": "string", "enum": ["day", "week", "month", "year"]},
        "time_range": {
            "type": "string",
            "pattern": r"^\d{4}-\d{2}-\d{2}\.\.\d{4}-\d{2}-\d{2}$",
            "description": "YYYY-MM-DD..YYYY-MM-DD; wins over freshness.",
        },
    },
}

RESEARCH_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **SEARCH_REQUEST["properties"],
        "fetch_top_n": {"type": "integer", "minimum": 0, "maximum": 5, "default": 2},
        "extract_mode": {"type": "string", "enum": ["summary", "full"], "default": "summary"},
        "max_page_length": {"type": "integer", "minimum": 1, "maximum": 200_000},
        "answer_with": {
            "type": "string",
            "enum": ["passages", "pages"],
            "default": "passages",
            "description": "passages: also return the passages of the pages that best match "
            "the query, best first, each with its page, heading and character offsets; pages: "
            "the pages alone.",
        },
        "max_passages": {
            "type": "integer",
            "minimum": 1,
            "maximum": 20,
            "default": 8,
            "description": "How many passages to return, across all pages.",
        },
    },
}

_HANDLES = {
    "type": "array",
    "maxItems": 10,
    "items": {"type": "string", "pattern": r"^[A-Za-z0-9_]{1,15}$"},
}

X_SEARCH_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 2000},
        "allowed_x_handles": {
            **_HANDLES,
            "description": "Only posts by these handles (no '@'); not with excluded_x_handles.",
        },
        "excluded_x_handles": {**_HANDLES, "description": "No posts by these handles (no '@')."},
        "from_date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "to_date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
    },
}

EXPLAIN_REQUEST: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"type": "string", "minLength": 1, "maxLength": 8192},
        "resolve": {"type": "boolean", "default": False},
        "tool": {
            "type": "string",
            "enum": ["WebFetch", "WebSearch", "XSearch", "Research"],
            "default": "WebFetch",
        },
    },
}

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def validate(schema: Schema, value: Any, *, where: str = "") -> None:
    """Raise InvalidRequestError naming the first field that breaks `schema`."""
    label = where or "the request body"
    kind = schema.get("type")
    if kind is not None:
        expected = _TYPES[kind]
        # bool is an int in Python, never in JSON.
        if not isinstance(value, expected) or (
            kind in ("integer", "number") and isinstance(value, bool)
        ):
            raise InvalidRequestError(f"{label}: must be {_article(kind)}")
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(str(o) for o in schema["enum"])
        raise InvalidRequestError(f"{label}: must be one of {options}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise InvalidRequestError(
                f"{label}: must not be empty"
                if schema.get("minLength") == 1
                else f"{label}: too short"
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise InvalidRequestError(f"{label}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise InvalidRequestError(f"{label}: {value[:80]!r} does not have the expected form")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidRequestError(f"{label}: must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidRequestError(f"{label}: must be at most {schema['maximum']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise InvalidRequestError(f"{label}: at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise InvalidRequestError(f"{label}: at most {schema['maxItems']} items")
        for index, item in enumerate(value):
            validate(schema.get("items", {}), item, where=f"{where}[{index}]")
    if isinstance(value, dict):
        properties: Mapping[str, Schema] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                raise InvalidRequestError(f"{_join(where, name)}: is required")
        for name, item in value.items():
            if name not in properties:
                if schema.get("additionalProperties", True) is False:
                    known = ", ".join(properties)
                    raise InvalidRequestError(
                        f"{_join(where, str(name))}: unknown field (known: {known})"
                    )
                continue
            validate(properties[name], item, where=_join(where, name))


def ignored_notes(value: Mapping[str, Any], ignored: Mapping[str, str]) -> list[str]:
    """The note of each accepted-and-ignored argument present in `value`, in `ignored`'s order."""
    return [note for name, note in ignored.items() if name in value]


def with_defaults(schema: Schema, value: Mapping[str, Any]) -> dict[str, Any]:
    """`value` with the schema's top-level defaults filled in."""
    out = dict(value)
    for name, prop in schema.get("properties", {}).items():
        if name not in out and "default" in prop:
            out[name] = prop["default"]
    return out


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _article(kind: str) -> str:
    return {"object": "an object", "array": "an array", "integer": "an integer"}.get(
        kind, f"a {kind}"
    )
