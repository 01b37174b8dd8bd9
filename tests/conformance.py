"""Checks a real response body against its documented schema (gateway/tools/responses.py)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator


def schema_errors(schema: dict[str, Any], body: Any) -> list[str]:
    """Every way `body` breaks `schema`, each as "path: message"; empty when it conforms."""
    Draft202012Validator.check_schema(schema)
    found = Draft202012Validator(schema).iter_errors(body)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in found)


def assert_conforms(schema: dict[str, Any], body: Any) -> None:
    errors = schema_errors(schema, body)
    assert not errors, "\n".join(errors)
