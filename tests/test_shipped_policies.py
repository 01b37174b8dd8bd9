"""The shipped policies: each validates against policies/policy.schema.json and loads cleanly,
the embedded default is byte for byte policies/default.yaml, the schema refuses broken
policies and agrees with the loader's defaults, and every case file is well formed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gateway.policy.load import PolicyValidationError, load_policy_bytes, load_policy_file
from gateway.policy.model import TOOL_NAMES

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
SCHEMA = json.loads((POLICIES / "policy.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

SHIPPED = sorted(p for p in POLICIES.glob("*.yaml") if not p.name.endswith(".tests.yaml"))
CASE_FILES = sorted(POLICIES.glob("*.tests.yaml"))

# docs/policy-reference.md, Decisions.
REASONS = {
    "invalid_url", "tool_disabled", "scheme_not_allowed", "port_not_allowed", "domain_denied",
    "domain_not_allowed", "ip_literal_not_allowed", "metadata_address", "own_address",
    "network_denied", "private_address", "redirect_limit", "redirect_downgrade",
    "method_not_allowed", "content_type_not_allowed", "not_tls", "sni_mismatch",
    "sensitive_data",
}  # fmt: skip


def _errors(document: Any) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(document)]


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_shipped_set() -> None:
    assert {p.name for p in SHIPPED} == {"default.yaml", "coding-agent.yaml", "research.yaml"}
    assert {p.name for p in CASE_FILES} == {p.name.replace(".yaml", ".tests.yaml") for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_policy_matches_the_schema(path: Path) -> None:
    assert _errors(yaml.safe_load(path.read_bytes())) == []


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_policy_loads_without_errors(path: Path) -> None:
    policy, issues = load_policy_file(path)
    assert policy.name == path.name.removesuffix(".yaml")
    assert all(issue.severity == "warning" for issue in issues)


def test_embedded_default_is_byte_identical() -> None:
    shipped = (POLICIES / "default.yaml").read_bytes()
    embedded = (ROOT / "gateway" / "policy" / "default.yaml").read_bytes()
    assert embedded == shipped


def _every_key_described(schema: Any, where: str) -> list[str]:
    missing = []
    if isinstance(schema, dict):
        for key, sub in schema.get("properties", {}).items():
            if "description" not in sub and "$ref" not in sub:
                missing.append(f"{where}.{key}")
        for key, sub in schema.items():
            missing += _every_key_described(sub, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            missing += _every_key_described(sub, f"{where}[{i}]")
    return missing


def test_every_schema_key_has_a_description() -> None:
    assert _every_key_described(SCHEMA, "") == []


def test_schema_tools_are_the_models() -> None:
    assert tuple(SCHEMA["properties"]["tools"]["properties"]) == TOOL_NAMES


def test_schema_defaults_are_the_loaders() -> None:
    policy, _ = load_policy_bytes(b"", source="<empty>", default_name="empty")
    props = SCHEMA["properties"]

    def default(*path: str) -> Any:
        node = props[path[0]]
        for key in path[1:]:
            node = node["properties"][key]
        return node.get("default", SCHEMA["$defs"]["results"]["default"])

    assert default("mode") == policy.mode
    assert default("default") == policy.default
    assert tuple(default("schemes")) == policy.schemes
    assert tuple(default("ports")) == policy.ports
    assert tuple(default("methods")) == policy.methods
    assert default("networks", "block_private") == policy.block_private
    assert default("redirects", "max") == policy.max_redirects
    assert default("redirects", "allow_downgrade") == policy.allow_downgrade
    for name in ("connect", "read", "total"):
        assert default("timeouts", name) == getattr(policy.timeouts, name)
    for name in ("max_response_bytes", "default_max_chars", "max_chars"):
        assert default("limits", name) == getattr(policy.limits, name)
    assert tuple(default("limits", "content_types")) == policy.limits.content_types
    for tool in TOOL_NAMES:
        assert default("tools", tool, "enabled") == policy.tool(tool).enabled
    for tool in ("WebSearch", "XSearch"):
        assert default("tools", tool, "results") == policy.tool(tool).results
    dlp = policy.dlp
    assert default("dlp", "mode") == dlp.mode
    assert default("dlp", "untrusted_hosts") == dlp.untrusted_hosts
    assert default("dlp", "body_prefix_bytes") == dlp.body_prefix_bytes
    assert dlp.entropy is not None
    assert default("dlp", "entropy", "min_length") == dlp.entropy.min_length
    assert default("dlp", "entropy", "min_bits_per_char") == dlp.entropy.min_bits_per_char
    assert tuple(default("dlp", "entropy", "where")) == dlp.entropy.where
    detectors = SCHEMA["properties"]["dlp"]["properties"]["detectors"]["properties"]
    assert set(detectors) == {*dlp.detectors, "entropy"}


GOOD = {
    "empty file": "",
    "empty sections": "domains:\nnetworks:\n  allow:\ntools:\n",
    "rule with message": "domains:\n  deny:\n    - {host: .pastebin.com, message: closed}\n",
    "all three patterns": "domains:\n  allow: [a.example, '*.b.example', .c.example]\n",
    "networks": "networks: {block_private: false, allow: [10.0.0.0/8, 'fd00::/8'], deny: ['::1']}\n",
    "fractional timeout": "timeouts: {connect: 2.5, read: 10, total: 60}\n",
    "report mode": "mode: report\ndefault: allow\n",
    "results mark": "tools: {WebSearch: {results: mark}, XSearch: {enabled: true}}\n",
    "dlp": "dlp: {mode: enforce, detectors: {jwt: false}, entropy: {where: [path]},"
    " patterns: [{name: emp, regex: 'EMP-[0-9]+'}], untrusted_hosts: report}\n",
    "dlp off quoted": "dlp: {mode: 'off'}\n",
}


@pytest.mark.parametrize("text", GOOD.values(), ids=GOOD.keys())
def test_schema_accepts(text: str) -> None:
    assert _errors(yaml.safe_load(text)) == []
    load_policy_bytes(text.encode(), source="<case>", default_name="case")  # the loader agrees


BROKEN = {
    "unknown key": "defualt: allow\n",
    "unknown nested key": "networks: {block_privat: true}\n",
    "unknown tool": "tools: {Research: {enabled: true}}\n",
    "results on WebFetch": "tools: {WebFetch: {results: drop}}\n",
    "port 70000": "ports: [443, 70000]\n",
    "port 0": "ports: [0]\n",
    "port as string": "ports: ['443']\n",
    "mode yes": "mode: yes\n",
    "mode unknown": "mode: audit\n",
    "default maybe": "default: maybe\n",
    "block_private string": "networks: {block_private: 'false'}\n",
    "negative limit": "limits: {max_response_bytes: -1}\n",
    "negative max_chars": "limits: {max_chars: -5}\n",
    "zero max_response_bytes": "limits: {max_response_bytes: 0}\n",
    "zero default_max_chars": "limits: {default_max_chars: 0}\n",
    "zero max_chars": "limits: {max_chars: 0, default_max_chars: 0}\n",
    "zero timeout": "timeouts: {connect: 0}\n",
    "redirect cap": "redirects: {max: 21}\n",
    "scheme ftp": "schemes: [https, ftp]\n",
    "method TRACE": "methods: [GET, TRACE]\n",
    "results keep": "tools: {WebSearch: {results: keep}}\n",
    "version 2": "version: 2\n",
    "pattern with path": "domains: {allow: [example.com/docs]}\n",
    "pattern with port": "domains: {allow: ['example.com:443']}\n",
    "mid-label wildcard": "domains: {allow: ['api-*.example.com']}\n",
    "rule without host": "domains: {deny: [{message: closed}]}\n",
    "rule with extra key": "domains: {deny: [{host: a.example, reason: x}]}\n",
    "cidr garbage": "networks: {deny: [not-a-network]}\n",
    "content type with parameter": "limits: {content_types: ['text/html; charset=utf-8']}\n",
    "top level list": "- version: 1\n",
    "dlp unknown detector": "dlp: {detectors: {aws: false}}\n",
    "dlp unknown key": "dlp: {mode: report, redact: true}\n",
    "dlp mode unknown": "dlp: {mode: block}\n",
    "dlp pattern without regex": "dlp: {patterns: [{name: emp}]}\n",
    "dlp entropy where": "dlp: {entropy: {where: [fragment]}}\n",
}


@pytest.mark.parametrize("text", BROKEN.values(), ids=BROKEN.keys())
def test_schema_rejects(text: str) -> None:
    assert _errors(yaml.safe_load(text)) != []
    with pytest.raises(PolicyValidationError):  # and so does the loader
        load_policy_bytes(text.encode(), source="<case>", default_name="case")


CASE_KEYS = {"url", "expect", "reason", "rule", "addresses"}


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_case_files_are_well_formed(path: Path) -> None:
    cases = yaml.safe_load(path.read_bytes())
    assert isinstance(cases, list) and len(cases) >= 12
    for case in cases:
        assert set(case) <= CASE_KEYS and {"url", "expect"} <= set(case), case
        assert case["expect"] in ("allow", "deny"), case
        assert ("reason" in case) <= (case["expect"] == "deny"), case
        assert case.get("reason", "invalid_url") in REASONS, case
        assert all(isinstance(a, str) for a in case.get("addresses", [])), case
    reasons = {case.get("reason") for case in cases}
    # Every shipped policy refuses these, whatever its default.
    assert {"scheme_not_allowed", "port_not_allowed", "metadata_address"} <= reasons
    assert {"allow", "deny"} == {case["expect"] for case in cases}
