"""Policy load time: a policy with 10,000 domain rules, read, validated and compiled.

The policy (written to a temporary file) mixes the three pattern forms across many registrable
domains, with a tenth of the rules as deny entries carrying messages, so every check runs:
patterns, public suffixes, duplicates and allow/deny conflicts. The median of several rounds
of `load_policy_file` is reported; the target is under one second. Lookup caches are cleared
between rounds so that each round pays the full cost.

    .venv/bin/python bench/policy_load.py [--rules 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gateway.policy import hosts
from gateway.policy.load import load_policy_file

TLDS = ("com", "org", "net", "io", "de", "co.uk", "dev", "info")


def policy_text(rules: int) -> str:
    allow, deny = [], []
    for i in range(rules):
        domain = f"site{i:05d}.example-{i % 97}.{TLDS[i % len(TLDS)]}"
        if i % 10 == 9:
            deny.append(f'    - {{host: "{domain}", message: "closed by rule {i}"}}')
        else:
            allow.append(f'    - "{("", ".", "*.")[i % 3]}{domain}"')
    return (
        "version: 1\nname: bench\n"
        "domains:\n  allow:\n" + "\n".join(allow) + "\n  deny:\n" + "\n".join(deny) + "\n"
        "networks:\n  allow: [10.20.0.0/16]\n  deny: [192.168.0.0/16]\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.yaml"
        path.write_text(policy_text(args.rules))
        size = path.stat().st_size
        times = []
        for _ in range(args.rounds):
            hosts.normalize_name.cache_clear()
            started = time.perf_counter()
            policy, warnings = load_policy_file(path)
            times.append(time.perf_counter() - started)
    rules = len(policy.domain_allow) + len(policy.domain_deny)
    median = statistics.median(times)
    print(
        f"policy load: {rules} domain rules, {size / 1e6:.2f} MB, {len(warnings)} warnings: "
        f"median {median * 1000:.0f} ms, best {min(times) * 1000:.0f} ms over {args.rounds} "
        f"rounds (target < 1000 ms: {'met' if median < 1 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
