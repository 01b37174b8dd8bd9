"""`gateway audit verify | summary | tail`: argparse adapters over `gateway.audit`. Every field
read from a log is attacker-controlled and goes through `printable` before it is shown.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from gateway.audit.chains import log_files, verify_paths
from gateway.audit.fields import Disposition
from gateway.audit.summary import parse_since, summarise_files
from gateway.audit.tail import format_record, record_filter, tail_records
from gateway.audit.terminal import printable
from gateway.audit.verify import FileReport
from gateway.provenance.dsse import DSSEError, load_public_key

EXIT_INVALID = 1
EXIT_USAGE = 2
# With --key: every chain intact, but some hold no checkpoint (written before signing was on).
EXIT_UNSIGNED = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="verify, summarise and follow audit logs",
        description="Verify an audit log's hash chain and signed checkpoints, summarise it, or "
        "follow it. Fields from the log are printed with control and escape sequences removed.",
    )
    actions = parser.add_subparsers(dest="audit_command", metavar="ACTION")
    actions.required = True

    verify = actions.add_parser(
        "verify",
        help="check the hash chains and signed checkpoints of a set of logs",
        description="PATH: files, folders (every *.jsonl in them) or globs. Files are grouped "
        "by chain (each process writes its own) and each chain's files put in order, so the "
        "order given does not matter. Each file is reported `valid` or `INVALID: reason (line "
        "N)`, then each chain, then the set; exit 1 if anything is invalid. With --key, a chain "
        "that is intact but holds no checkpoint (written before signing was turned on) is "
        "UNSIGNED, not INVALID: exit 3 when that is the only finding.",
    )
    verify.add_argument(
        "paths", nargs="+", metavar="PATH", help="audit log files, folders or globs"
    )
    verify.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="PUB",
        help="an Ed25519 public key (PEM) that signs checkpoints; repeat for retired keys",
    )
    verify.add_argument(
        "--checkpoints",
        action="append",
        default=[],
        metavar="FILE",
        help="a copy of the checkpoints kept elsewhere (audit.checkpoints_path)",
    )
    verify.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per file, per chain (kind chain) and for the set (kind set)",
    )
    verify.set_defaults(run=_run_verify)

    summary = actions.add_parser("summary", help="totals, denials, clients, timeline")
    summary.add_argument(
        "files", nargs="+", metavar="PATH", help="audit log files, folders or globs"
    )
    summary.add_argument("--since", help="a duration (24h, 30m, 7d) or a UTC time")
    summary.add_argument("--client", metavar="ID", help="only this client's records")
    summary.add_argument("--top", type=int, default=10, help="rows in the top lists (10)")
    summary.add_argument("--json", action="store_true", help="print one JSON object")
    summary.set_defaults(run=_run_summary)

    tail = actions.add_parser(
        "tail",
        help="the last records, and new ones with -f",
        description="PATH: an audit log file, or a folder or glob: its newest chain file, and "
        "with -f the next one as it starts (a new chain file appearing takes over). Rotation "
        "is followed either way.",
    )
    tail.add_argument(
        "file", metavar="PATH", help="an audit log file, or a folder or glob of them"
    )
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    tail.add_argument("-n", "--lines", type=int, default=10, help="records shown first (10)")
    tail.add_argument("--client", metavar="ID", help="only this client's records")
    tail.add_argument(
        "--decision", choices=[d.value for d in Disposition], help="only records with this outcome"
    )
    tail.set_defaults(run=_run_tail)


def _run_verify(args: argparse.Namespace) -> int:
    try:
        keys = [load_public_key(path) for path in args.key]
    except DSSEError as exc:
        print(f"gateway audit verify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    result = verify_paths(args.paths, public_keys=keys, checkpoint_files=args.checkpoints)
    for path in result.unmatched:
        print(f"gateway audit verify: {path}: no such file", file=sys.stderr)
    for chain in result.chains:
        for report in chain.files:
            _print_file(report, json_lines=args.json)
        _emit(chain.to_dict(), f"chain {printable(chain.name)}: {chain.describe()}", args.json)
    for report in result.checkpoints:
        _print_file(report, json_lines=args.json)
    _emit(result.to_dict(), f"set: {result.describe()}", args.json)
    if not result.valid:
        return EXIT_INVALID
    return EXIT_UNSIGNED if result.unsigned else 0


def _emit(value: dict[str, Any], text: str, json_lines: bool) -> None:
    if json_lines:
        _print_json(value)
    else:
        print(text)


def _print_file(report: FileReport, *, json_lines: bool) -> None:
    if json_lines:
        _print_json(report.to_dict())
        return
    print(f"{printable(report.path)}: {printable(report.describe(), 1000)}")
    for warning in report.warnings:
        print(f"  warning: {printable(warning, 1000)}")


def _print_json(value: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def _run_summary(args: argparse.Namespace) -> int:
    since = None
    if args.since:
        try:
            since = parse_since(args.since, now=time.time())
        except ValueError as exc:
            print(f"gateway audit summary: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        logs, unmatched = log_files(args.files)
        if unmatched:
            print(f"gateway audit summary: {unmatched[0]}: no such file", file=sys.stderr)
            return EXIT_USAGE
        result = summarise_files(logs, since=since, client=args.client, top=max(1, args.top))
    except OSError as exc:
        print(f"gateway audit summary: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        sys.stdout.write(render_summary(result))
    return 0


def _run_tail(args: argparse.Namespace) -> int:
    matches = record_filter(client=args.client, disposition=args.decision)
    try:
        for record in tail_records(
            args.file, backlog=max(0, args.lines), follow=args.follow, matches=matches
        ):
            print(format_record(record), flush=args.follow)
    except FileNotFoundError:
        print(f"gateway audit tail: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"gateway audit tail: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def render_summary(result: dict[str, Any]) -> str:
    """The summary as text for a terminal; strings from the log pass through `printable`."""
    out: list[str] = []
    window = result["window"]
    scope = f" for client {printable(result['client'], 60)}" if result["client"] else ""
    out.append(
        f"{result['records']} records{scope}, {window['first'] or '-'} to {window['last'] or '-'}"
        + (f" (since {window['since']})" if window["since"] else "")
    )
    if result["skipped_lines"]:
        out.append(f"{result['skipped_lines']} unreadable lines skipped")
    out.append("")
    columns = [d.value for d in Disposition]
    out.append(f"Decisions ({result['decisions']}: one per tool call, proxied request or tunnel)")
    out.append("  " + "  ".join(f"{name}={result['totals'][name]}" for name in columns))
    out.append("  (deny: refused by the policy; error: allowed, then failed)")
    out.append("")
    out.append("Not decisions (counted apart)")
    apart = result["not_decisions"]
    out.extend(
        _table(
            ["records", "count"],
            [
                ["malformed requests (refused before any rule)", apart["malformed_requests"]],
                [
                    "authentication challenges (no credential sent; clients retry with one)",
                    apart["auth_challenges"],
                ],
                ["authentication failures (a credential refused)", apart["auth_failures"]],
                ["tunnel closes (each tunnel's decision is its CONNECT)", apart["tunnel_closes"]],
            ],
        )
    )
    out.append("")
    out.append("By tool")
    out.extend(
        _table(
            ["tool", *columns, "malformed"],
            [
                [printable(tool, 32), *(counts[c] for c in columns), counts["malformed"]]
                for tool, counts in result["tools"].items()
            ],
        )
    )
    out.append("")
    out.append("Top domains refused by the policy")
    out.extend(
        _table(
            ["domain", "count", "rule", "reason", "first seen", "last seen"],
            [
                [
                    printable(row["domain"], 80),
                    row["count"],
                    printable(row["rule"], 40),
                    printable(row["reason"], 40),
                    row["first_seen"] or "-",
                    row["last_seen"] or "-",
                ]
                for row in result["top_denied_domains"]
            ],
        )
    )
    out.append("")
    out.append("Clients")
    out.extend(
        _table(
            ["client", "requests", "denials", "errors", "malformed", "domains", "bytes"],
            [
                [
                    printable(row["id"], 40),
                    row["requests"],
                    row["denials"],
                    row["errors"],
                    row["malformed"],
                    row["distinct_domains"],
                    row["bytes"],
                ]
                for row in result["clients"]
            ],
        )
    )
    out.append("")
    out.append("Policy refusals by reason")
    out.extend(
        _table(
            ["reason", "count"],
            [[printable(reason, 60), count] for reason, count in result["deny_reasons"].items()],
        )
    )
    out.append("")
    out.append("Decisions by UTC hour")
    out.extend(
        _table(
            ["hour", *columns],
            [[row["hour"], *(row[c] for c in columns)] for row in result["timeline"]],
        )
    )
    out.append("")
    out.append("Injection signals (sanitised content by domain)")
    out.extend(
        _table(
            ["domain", "records", "marker look-alikes", "invisible chars"],
            [
                [
                    printable(row["domain"], 80),
                    row["records"],
                    row["marker_lookalikes"],
                    row["invisible_chars"],
                ]
                for row in result["injection_signals"]
            ],
        )
    )
    return "\n".join(out) + "\n"


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["  (none)"]
    cells = [headers, *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
