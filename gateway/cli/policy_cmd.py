"""`gateway policy check|explain|test`: the policy author's tools, as thin adapters.

Output formats (also in the README's policy reference):
- check: one `FILE:LINE:COL: code: message` line per problem, a warning's code written
  `warning[code]`; `FILE: ok (name NAME, sha256 HEX)` for a usable file. Exit 1 on any error.
- explain: per URL `URL: VERDICT (REASON, rule RULE)` and indented details (a refusal's
  message and how to allow it), or with --json one object per line. Never resolves names
  unless --resolve. With --config (default $GATEWAY_CONFIG) it judges as that gateway would:
  its resolver.hosts and resolver.system_hosts answer names, its listening addresses are its
  own, its proxy.connect_ports apply, and --client ID takes that client's policy (FILE is then
  the first URL). Exit 0; 2 for a broken policy or configuration.
- test: each failing case as `CASES:LINE: URL: expected V/R/RULE, got V/R/RULE`, then
  `N passed, M failed`. Exit 1 on a failure; 2 for a broken policy or cases file.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.cli.config_cmd import add_config_flag
from gateway.config import GatewayConfig, ProxyConfig
from gateway.tools.explain import (
    REASONS,
    IPAddress,
    OwnAddresses,
    Policy,
    PolicyValidationError,
    Verdict,
    answer_table,
    explain,
    judge,
    listening_addresses,
    load_default_policy,
    load_policy_file,
)
from gateway.yamlstrict.issues import Issue, SourceError
from gateway.yamlstrict.source import compose, read_bounded
from gateway.yamlstrict.walk import Field, Walker, choice_field, string_field

TOOLS = ("WebFetch", "WebSearch", "XSearch", "Research")
MAX_CASES_BYTES = 4 << 20


def _port_list(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated port list") from None
    if not ports or any(not 1 <= p <= 65535 for p in ports):
        raise argparse.ArgumentTypeError(f"{text!r}: ports are 1 to 65535")
    return ports


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "policy", help="check, explain and test policy files", description=__doc__
    )
    sub = parser.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    sub.required = True

    check = sub.add_parser("check", help="validate policy files, printing every problem")
    check.add_argument("files", nargs="+", metavar="FILE", help="policy files (YAML)")
    check.set_defaults(run=run_check)

    explain = sub.add_parser("explain", help="say which rule decides each URL, and why")
    explain.add_argument("file", metavar="FILE", help="the policy file")
    explain.add_argument("urls", nargs="*", metavar="URL", help="URLs to judge")
    explain.add_argument("--json", action="store_true", help="one JSON object per line")
    explain.add_argument(
        "--tool", choices=TOOLS, help="the tool asking (default WebFetch; none with --method)"
    )
    explain.add_argument(
        "--method",
        help="judge as a forward-proxy request with this method (no tool asks); CONNECT"
        " judges host:port as a tunnel",
    )
    explain.add_argument(
        "--connect-ports",
        type=_port_list,
        default=None,
        metavar="PORT,...",
        help="the gateway configuration's proxy.connect_ports for --method CONNECT"
        " (default: the --config file's, else 443)",
    )
    explain.add_argument(
        "--resolve",
        action="store_true",
        help="resolve allowed names (resolver.hosts and resolver.system_hosts of --config, "
        "then DNS) and check every address",
    )
    add_config_flag(explain)
    explain.add_argument(
        "--client",
        metavar="ID",
        help="with --config: judge under this client's policy, as the gateway does for its "
        "token (FILE is then the first URL)",
    )
    explain.set_defaults(run=run_explain)

    test = sub.add_parser("test", help="run a policy's test cases")
    test.add_argument("file", metavar="FILE", help="the policy file")
    test.add_argument(
        "cases", metavar="CASES.yaml", help="a list of {url, expect, reason?, rule?, addresses?}"
    )
    test.set_defaults(run=run_test)


# --- check ---------------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            policy, warnings = load_policy_file(path)
        except PolicyValidationError as exc:
            _print_issues(exc.issues)
            status = 1
            continue
        _print_issues(warnings)
        print(f"{path}: ok (name {policy.name}, sha256 {policy.sha256})")
    return status


def _print_issues(issues: Sequence[Issue], *, file: Any = None) -> None:
    for issue in issues:
        print(issue, file=file or sys.stdout)


def _load(path: str) -> Policy | None:
    try:
        policy, warnings = load_policy_file(path)
    except PolicyValidationError as exc:
        _print_issues(exc.issues, file=sys.stderr)
        return None
    _print_issues(warnings, file=sys.stderr)
    return policy


# --- explain -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Setting:
    """What the gateway would judge with: the policy, its resolver's static answers, its own
    listening addresses and `proxy.connect_ports`."""

    policy: Policy
    urls: tuple[str, ...]
    static_hosts: Mapping[str, Sequence[IPAddress]] | None = None
    own_addresses: OwnAddresses = ()
    connect_ports: tuple[int, ...] = ProxyConfig().connect_ports


def run_explain(args: argparse.Namespace) -> int:
    setting = _explain_setting(args)
    if setting is None:
        return 2
    asyncio.run(_explain_all(setting, args))
    return 0


def _explain_setting(args: argparse.Namespace) -> _Setting | None:
    if not args.urls and args.client is None:
        print("gateway policy explain: give FILE and at least one URL", file=sys.stderr)
        return None
    if args.config is None:
        if args.client is not None:
            print(
                "gateway policy explain: --client needs --config (or $GATEWAY_CONFIG)",
                file=sys.stderr,
            )
            return None
        policy = _load(args.file)
        if policy is None:
            return None
        ports = args.connect_ports or ProxyConfig().connect_ports
        return _Setting(policy, tuple(args.urls), connect_ports=ports)
    # Loaded only here: without a configuration, explain stays free of aiohttp.
    from gateway.configload import ConfigError, load_config_file

    try:
        config = load_config_file(args.config)
    except ConfigError as exc:
        _print_issues(exc.issues, file=sys.stderr)
        return None
    urls = (args.file, *args.urls) if args.client is not None else tuple(args.urls)
    if args.client is None:
        policy = _load(args.file)
    else:
        client = next((c for c in config.clients if c.id == args.client), None)
        if client is None:
            known = ", ".join(c.id for c in config.clients) or "none"
            print(
                f"gateway policy explain: no client {args.client[:64]!r} in {args.config} "
                f"(clients: {known})",
                file=sys.stderr,
            )
            return None
        path = client.policy or config.policy
        policy = _load(path) if path is not None else load_default_policy()
    if policy is None:
        return None
    return _Setting(
        policy,
        urls,
        static_hosts=answer_table(
            config.resolver.hosts, system_hosts=config.resolver.system_hosts
        ),
        own_addresses=_own_addresses(config),
        connect_ports=args.connect_ports or config.proxy.connect_ports,
    )


def _own_addresses(config: GatewayConfig) -> OwnAddresses:
    """The (network, port) pairs the gateway configured by `config` listens on, as it counts
    them once listening (a name such as localhost: its loopback addresses)."""
    ports = [config.listen.port]
    if config.listen.proxy_port is not None:
        ports.append(config.listen.proxy_port)
    try:
        hosts = [str(ipaddress.ip_address(config.listen.host.strip("[]")))]
    except ValueError:
        hosts = ["127.0.0.1", "::1"]
    return listening_addresses([(host, port) for host in hosts for port in ports])


async def _explain_all(setting: _Setting, args: argparse.Namespace) -> None:
    for url in setting.urls:
        verdict = await explain(
            setting.policy,
            url,
            tool=args.tool,
            method=args.method,
            resolve=args.resolve,
            static_hosts=setting.static_hosts,
            own_addresses=setting.own_addresses,
            connect_ports=setting.connect_ports,
        )
        if args.json:
            print(json.dumps(_explain_record(url, verdict, resolved=args.resolve)))
        else:
            print(_explain_text(url, verdict))


def _explain_record(url: str, verdict: Verdict, *, resolved: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "url": url,
        "decision": verdict.verdict,
        "reason": verdict.reason,
        "rule": verdict.rule,
        "enforced": verdict.enforced,
        "message": verdict.message,
        "hint": verdict.hint,
        "detail": verdict.decision.detail,
        "note": verdict.note,
    }
    if verdict.decision.dlp is not None:
        record["dlp"] = verdict.decision.dlp.to_record()
    if resolved:
        record["addresses"] = [str(ip) for ip in verdict.addresses]
        record["lookup_error"] = verdict.lookup_error
    return record


def _explain_text(url: str, verdict: Verdict) -> str:
    decision = verdict.decision
    reason = f"{verdict.reason}, " if verdict.reason else ""
    lines = [f"{url}: {verdict.verdict} ({reason}rule {verdict.rule})"]
    if verdict.lookup_error:
        lines.append(f"  lookup failed: {verdict.lookup_error}")
    else:
        lines.append(f"  {decision.describe()}")
    if verdict.hint:
        lines.append(f"  {verdict.hint}")
    if verdict.addresses:
        lines.append(f"  addresses: {', '.join(str(ip) for ip in verdict.addresses)}")
    if verdict.note:
        lines.append(f"  note: {verdict.note}")
    return "\n".join(lines)


# --- test ----------------------------------------------------------------------------------


def _read_addresses(w: Walker, node: Any, path: str) -> tuple[IPAddress, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    if not items:
        w.error(node, "bad_value", f"{path} must list at least one address")
        return None
    found: list[IPAddress] = []
    for i, item in enumerate(items):
        text = w.string(item, f"{path}[{i}]")
        if text is None:
            return None
        try:
            found.append(ipaddress.ip_address(text))
        except ValueError:
            w.error(item, "bad_address", f"{path}[{i}]: {text!r} is not an IP address")
            return None
    return tuple(found)


_CASE_FIELDS: dict[str, Field] = {
    "url": string_field(required=True),
    "expect": Field(lambda w, n, p: w.choice(n, p, ("allow", "deny")), None, required=True),
    "reason": choice_field(None, REASONS),
    "rule": string_field(),
    "addresses": Field(_read_addresses, None),
    "tool": choice_field(None, TOOLS),
    "method": string_field(),
}


@dataclass(frozen=True, slots=True)
class Case:
    line: int
    url: str
    expect: str
    reason: str | None
    rule: str | None
    addresses: tuple[IPAddress, ...] | None
    tool: str | None
    method: str | None

    def failure(self, verdict: Verdict) -> str | None:
        """None when the verdict meets every expectation the case states."""
        ok = (
            verdict.verdict == self.expect
            and (self.reason is None or self.reason == verdict.reason)
            and (self.rule is None or self.rule == verdict.rule)
        )
        if ok:
            return None
        default_reason = "-" if self.expect == "allow" else "*"
        expected = f"{self.expect}/{self.reason or default_reason}/{self.rule or '*'}"
        got = f"{verdict.verdict}/{verdict.reason or '-'}/{verdict.rule}"
        return f"{self.url}: expected {expected}, got {got}"


def load_cases(path: str) -> tuple[Case, ...]:
    """The cases file, as strict as a policy; SourceError lists every problem."""
    data = read_bounded(path, max_bytes=MAX_CASES_BYTES)
    document = compose(data, source=path, max_bytes=MAX_CASES_BYTES)
    walker = Walker.of(document)
    if document.root is None:
        walker.error(None, "no_cases", "the file has no cases; write a list of {url, expect}")
        raise SourceError(walker.sorted_issues())
    # An empty list is no test at all: it would pass whatever the policy says.
    items = walker.sequence(document.root, "the cases file", at_least_one="case") or []
    cases = []
    for i, node in enumerate(items):
        section = walker.mapping(node, _CASE_FIELDS, path=f"[{i}]")
        if section.invalid:
            continue
        values = section.values
        cases.append(
            Case(
                node.start_mark.line + 1,
                values["url"],
                values["expect"],
                values["reason"],
                values["rule"],
                values["addresses"],
                values["tool"],
                values["method"],
            )
        )
    if walker.has_errors:
        raise SourceError(walker.sorted_issues())
    return tuple(cases)


def run_test(args: argparse.Namespace) -> int:
    policy = _load(args.file)
    if policy is None:
        return 2
    try:
        cases = load_cases(args.cases)
    except SourceError as exc:
        _print_issues(exc.issues, file=sys.stderr)
        return 2
    failed = 0
    for case in cases:
        verdict = judge(
            policy, case.url, tool=case.tool, method=case.method, addresses=case.addresses
        )
        failure = case.failure(verdict)
        if failure is not None:
            failed += 1
            print(f"{args.cases}:{case.line}: {failure}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0
