"""`gateway init [DIR]`: a working set-up in DIR (default: the current folder).

Writes DIR/gateway.yaml (listening on loopback, API and forward proxy), DIR/policies/agent.yaml
(an allowlist to start from), DIR/policies/agent.tests.yaml (its test cases) and a client
whose fresh token is printed once; only its SHA-256 is stored. Refuses, writing nothing, when
any of the files exists. Then: `gateway serve --config DIR/gateway.yaml`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

CONFIG_NAME = "gateway.yaml"
POLICY_NAME = os.path.join("policies", "agent.yaml")
CASES_NAME = os.path.join("policies", "agent.tests.yaml")

CONFIG_TEMPLATE = """\
# The gateway configuration written by `gateway init`. Every key, with its default and what it
# does, is listed in examples/config/gateway.yaml of the gateway's source (its README links it);
# the policy keys are in docs/policy-reference.md. Relative paths are relative to this file.
#
#   gateway config check {config}       # every problem as FILE:LINE:COL: code: message
#   gateway serve --config {config}
#
# The API (WebFetch, WebSearch, MCP at /mcp) listens on {host}:{port}, the forward proxy for
# HTTP_PROXY/HTTPS_PROXY on {host}:{proxy_port}. Both want the client's token.
listen: {{host: {host}, port: {port}, proxy_port: {proxy_port}}}
policy: policies/agent.yaml
audit:
  path: audit/gateway-{{instance}}.jsonl   # one hash chain per process: gateway audit verify audit/
clients:
  # Make more with: gateway token new CLIENT
  - id: {client}
    token_sha256: "{token_sha256}"
    policy: policies/agent.yaml
    limits: {{requests_per_minute: 600, concurrent: 16}}
resolver:
  system_hosts: false   # true: also answer names from /etc/hosts (addresses still checked)
  hosts: {{}}             # static answers, e.g. mirror.internal.example: ["10.20.0.7"]
"""

POLICY_TEMPLATE = """\
# The agent's policy, written by `gateway init`: an allowlist to grow. A host no rule names is
# refused (domain_not_allowed), and so is every private, loopback or metadata address.
#
#   gateway policy check policies/agent.yaml
#   gateway policy test policies/agent.yaml policies/agent.tests.yaml
#   gateway policy explain policies/agent.yaml https://example.org/
#
# To let the agent reach a host inside your network, allow its name under domains.allow AND
# its addresses under networks.allow (e.g. "10.20.0.0/24"); both are needed.
version: 1
name: agent
mode: enforce            # report: log would-be denials without refusing them
default: deny
schemes: [https, http]
ports: [443, 80]

domains:
  allow:
    - docs.python.org        # domains.allow[0]
    - .pypi.org              # domains.allow[1]: pypi.org and its subdomains
    - files.pythonhosted.org # domains.allow[2]
    - .wikipedia.org         # domains.allow[3]
  deny:
    - host: upload.pypi.org  # domains.deny[0]
      message: "publishing packages is not allowed"

networks:
  block_private: true
  allow: []
  deny: []

methods: [GET, HEAD]

# Outbound data-loss prevention: report records every secret-shaped value (an API key, a
# token, a canary) found in a URL, with reason sensitive_data, and lets it pass; enforce
# refuses it. Turn it off only with dlp: {mode: off}.
dlp:
  mode: report

tools:
  WebFetch: {enabled: true}
  WebSearch: {enabled: true, results: drop}
  XSearch: {enabled: false}
"""

CASES_TEMPLATE = """\
# Test cases for agent.yaml: gateway policy test policies/agent.yaml policies/agent.tests.yaml
# Each case: url, expect (allow | deny), optionally reason, rule, and addresses (stands in for
# DNS: "this name resolves to these addresses").
- url: https://docs.python.org/3/
  expect: allow
  rule: domains.allow[0]
- url: https://pypi.org/simple/requests/
  expect: allow
  rule: domains.allow[1]
- url: https://upload.pypi.org/legacy/
  expect: deny
  reason: domain_denied
  rule: domains.deny[0]
- url: https://example.com/
  expect: deny
  reason: domain_not_allowed
  rule: default
- url: http://169.254.169.254/latest/meta-data/
  expect: deny
  reason: ip_literal_not_allowed
- url: https://docs.python.org/search.html?q=ghp_0123456789abcdefghijklmnopqrstuvwxyz
  expect: deny             # dlp.mode report: recorded as a would-be denial, let through
  reason: sensitive_data
  rule: dlp.github_token
- url: https://docs.python.org/3/
  addresses: ["10.0.0.5"]
  expect: deny
  reason: private_address
  rule: networks.block_private
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write a working set-up: config, policy and tests, a client token",
        description=__doc__,
    )
    parser.add_argument(
        "directory", nargs="?", default=".", metavar="DIR", help="where to write (default: .)"
    )
    parser.add_argument(
        "--client", default="agent", metavar="ID", help="the client's id (default: agent)"
    )
    parser.add_argument("--port", type=int, default=8080, help="API port (default 8080)")
    parser.add_argument(
        "--proxy-port", type=int, default=8081, help="forward-proxy port (default 8081)"
    )
    parser.set_defaults(run=run_init)


def run_init(args: argparse.Namespace) -> int:
    from gateway.configload import is_valid_id, new_token

    if not is_valid_id(args.client):
        print(f"gateway init: {args.client[:70]!r} is not a client id", file=sys.stderr)
        return 2
    if not all(0 < port < 65536 for port in (args.port, args.proxy_port)) or (
        args.port == args.proxy_port
    ):
        print("gateway init: give two different ports from 1 to 65535", file=sys.stderr)
        return 2
    paths = [os.path.join(args.directory, name) for name in (CONFIG_NAME, POLICY_NAME, CASES_NAME)]
    existing = [path for path in paths if os.path.lexists(path)]
    if existing:
        print(
            f"gateway init: {', '.join(existing)} already exists; nothing written "
            "(choose another DIR or move the files away)",
            file=sys.stderr,
        )
        return 1
    token, digest = new_token()
    config_path, policy_path, cases_path = paths
    texts = {
        config_path: CONFIG_TEMPLATE.format(
            config=config_path,
            host="127.0.0.1",
            port=args.port,
            proxy_port=args.proxy_port,
            client=args.client,
            token_sha256=digest,
        ),
        policy_path: POLICY_TEMPLATE,
        cases_path: CASES_TEMPLATE,
    }
    try:
        os.makedirs(os.path.dirname(policy_path), exist_ok=True)
        for path, text in texts.items():
            with open(path, "x", encoding="utf-8") as handle:  # "x": never overwrite
                handle.write(text)
    except OSError as exc:
        print(f"gateway init: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"wrote {path}")
    print(
        f"policy {policy_path}: outbound DLP in report mode (dlp.mode: report): secrets found "
        "in URLs are recorded, not refused; set dlp.mode: enforce to refuse them"
    )
    print(f"client {args.client}: token {token}")
    print("  (shown once; only its SHA-256 is in the configuration. Keep it secret.)")
    print("next:")
    print(f"  gateway config check {config_path}")
    print(f"  gateway policy test {policy_path} {cases_path}")
    print(f"  gateway serve --config {config_path}")
    print(
        f"  agents: MCP at http://127.0.0.1:{args.port}/mcp, proxy "
        f"http://{args.client}:<token>@127.0.0.1:{args.proxy_port} (docs/agents.md)"
    )
    return 0
