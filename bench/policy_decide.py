"""Policy decision cost: `decide_url` on a policy with 10 domain rules and on one with 10,000.

Both policies are YAML files in a temporary folder, loaded with `load_policy_file`; the
10-rule policy is a sample of the 10,000-rule one (allow rules of the three pattern forms,
deny rules with messages), spread from its first rule to its last, so a scan would reach
them late and a lookup by label would not care. The URLs mix allowed names (exact, subdomain
and domain-and-subdomain matches), denied names, names no rule covers (default deny, a
label-by-label walk of deep names), IP literals (allowed by a `networks.allow` CIDR and not)
and invalid URLs, with a fresh subdomain or path per call so that no cache answers for the
decision. Every decision is checked against the expected outcome before it counts.

The two sizes run interleaved, batch by batch, in each round; each call is timed on its
own (perf_counter_ns); the figures are the medians over rounds of each round's median and
p99. Targets: under 20 µs median per decision, and 10,000 rules no dearer than 10 (ratio of
medians within noise, printed).

    .venv/bin/python bench/policy_decide.py [--rounds 5] [--urls 20000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common import median, percentile

from gateway.policy import hosts
from gateway.policy.engine import Reason, decide_url
from gateway.policy.load import load_policy_file
from gateway.policy.model import Policy

TLDS = ("com", "org", "net", "io", "de", "co.uk", "dev", "info")
FORMS = ("", ".", "*.")  # exact, domain and subdomains, subdomains only
BATCH = 500
TARGET_MEDIAN_US = 20.0


def domain(i: int) -> str:
    return f"site{i:05d}.example-{i % 97}.{TLDS[i % len(TLDS)]}"


def rule_line(i: int) -> tuple[bool, str]:
    """(is_deny, YAML list item) for rule number `i`."""
    if i % 10 == 9:
        return True, f'    - {{host: "{domain(i)}", message: "closed by rule {i}"}}'
    return False, f'    - "{FORMS[i % 3]}{domain(i)}"'


def sample(rules: int) -> tuple[int, ...]:
    """The small policy's 10 rules, by position in the large one: 8 allow rules spread from
    the first to the last eighth, and the deny rules nearest the middle and the end."""
    if rules < 100:
        raise SystemExit("--rules must be at least 100")
    allow = [k * rules // 8 + (1 if (k * rules // 8) % 10 == 9 else 0) for k in range(8)]
    deny = [(rules // 2) // 10 * 10 + 9, (rules - 10) // 10 * 10 + 9]
    return tuple(allow + deny)


def policy_text(numbers: list[int], name: str) -> str:
    allow: list[str] = []
    deny: list[str] = []
    for i in numbers:
        is_deny, line = rule_line(i)
        (deny if is_deny else allow).append(line)
    return (
        f"version: 1\nname: {name}\n"
        "domains:\n  allow:\n" + "\n".join(allow) + "\n  deny:\n" + "\n".join(deny) + "\n"
        "networks:\n  allow: [10.20.0.0/16]\n  deny: [192.168.0.0/16]\n"
    )


@dataclass(frozen=True, slots=True)
class Case:
    kind: str  # allowed | denied | default-denied | ip-allowed | ip-denied | invalid
    url: str
    allowed: bool
    reason: Reason | None


def cases(rules: tuple[int, ...], round_index: int, count: int) -> list[Case]:
    """`count` URLs of every kind, unique per round (fresh names and paths defeat caches)."""
    out: list[Case] = []
    allow_rules = [i for i in rules if i % 10 != 9]
    deny_rules = [i for i in rules if i % 10 == 9]
    invalid = (
        "http://exa mple.com/",
        "http://425.510.425.510/",
        "https://a*b.example.com/",
        "http://[::zz]/",
        "http://user:pass@example.com/",
        "example.com/no-scheme",
        "http://exam\u00adple.com/",
        "http://example.com:99999/",
    )
    n = 0
    while len(out) < count:
        n += 1
        tag = f"r{round_index}n{n}"
        i = allow_rules[n % len(allow_rules)]
        form = FORMS[i % 3]
        host = domain(i) if form == "" else f"{tag}.{domain(i)}"
        if form == "." and n % 2:
            host = domain(i)
        out.append(Case("allowed", f"https://{host}/articles/{tag}?page=2", True, None))
        j = deny_rules[n % len(deny_rules)]
        out.append(Case("denied", f"https://{domain(j)}/{tag}", False, Reason.DOMAIN_DENIED))
        out.append(
            Case(
                "default-denied",
                f"https://{tag}.deep.sub.not-listed-{n % 50}.example.org/x",
                False,
                Reason.DOMAIN_NOT_ALLOWED,
            )
        )
        out.append(
            Case("ip-allowed", f"http://10.20.{n % 256}.{(n // 256) % 256}/{tag}", True, None)
        )
        out.append(
            Case(
                "ip-denied",
                f"http://8.8.{n % 256}.{(n // 256) % 256}/{tag}",
                False,
                Reason.IP_LITERAL_NOT_ALLOWED,
            )
        )
        out.append(Case("invalid", invalid[n % len(invalid)], False, Reason.INVALID_URL))
    return out[:count]


def check(policy: Policy, case: Case) -> None:
    decision, _ = decide_url(policy, case.url)
    if decision.allowed != case.allowed or decision.reason != case.reason:
        sys.exit(
            f"unexpected decision for {case.url!r} ({case.kind}) under {policy.name}: "
            f"allowed={decision.allowed} reason={decision.reason} rule={decision.rule}"
        )


def timed(
    policy: Policy, batch: list[Case], into: list[int], by_kind: dict[str, list[int]]
) -> None:
    clock: Callable[[], int] = time.perf_counter_ns
    for case in batch:
        started = clock()
        decide_url(policy, case.url)
        took = clock() - started
        into.append(took)
        by_kind.setdefault(case.kind, []).append(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--urls", type=int, default=20_000, help="decisions per size per round")
    parser.add_argument("--rules", type=int, default=10_000)
    args = parser.parse_args()

    chosen = sample(args.rules)
    with tempfile.TemporaryDirectory() as folder:
        small_path = Path(folder) / "small.yaml"
        large_path = Path(folder) / "large.yaml"
        small_path.write_text(policy_text(list(chosen), "decide-10"))
        large_path.write_text(policy_text(list(range(args.rules)), f"decide-{args.rules}"))
        small, _ = load_policy_file(small_path)
        hosts.normalize_name.cache_clear()
        started = time.perf_counter()
        large, _ = load_policy_file(large_path)
        load_seconds = time.perf_counter() - started
    policies = {"10 rules": small, f"{args.rules} rules": large}
    counts = {label: len(p.domain_allow) + len(p.domain_deny) for label, p in policies.items()}

    medians: dict[str, list[float]] = {label: [] for label in policies}
    p99s: dict[str, list[float]] = {label: [] for label in policies}
    kinds: Counter[str] = Counter()
    kind_medians: dict[tuple[str, str], list[float]] = {}
    for round_index in range(args.rounds):
        # Different URLs for each size, so neither warms a cache for the other.
        work = {
            label: cases(chosen, round_index * 2 + k, args.urls) for k, label in enumerate(policies)
        }
        for label, policy in policies.items():
            for case in work[label][:200]:
                check(policy, case)
        kinds = Counter(case.kind for case in work[next(iter(policies))])
        samples: dict[str, list[int]] = {label: [] for label in policies}
        by_kind: dict[str, dict[str, list[int]]] = {label: {} for label in policies}
        gc.collect()
        for start in range(0, args.urls, BATCH):
            order = list(policies) if (start // BATCH) % 2 == 0 else list(reversed(policies))
            for label in order:
                batch = work[label][start : start + BATCH]
                timed(policies[label], batch, samples[label], by_kind[label])
        for label in policies:
            for kind, values in by_kind[label].items():
                kind_medians.setdefault((label, kind), []).append(percentile(values, 50) / 1000)
            medians[label].append(percentile(samples[label], 50) / 1000)
            p99s[label].append(percentile(samples[label], 99) / 1000)

    small_label, large_label = policies
    print(
        f"policy decision: {args.urls} URLs per size per round, {args.rounds} rounds; "
        f"mix: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}"
    )
    print(f"{'policy':<14} {'domain rules':>12} {'median µs':>10} {'p99 µs':>8}")
    for label in policies:
        print(
            f"{label:<14} {counts[label]:>12} {median(medians[label]):>10.2f} "
            f"{median(p99s[label]):>8.2f}"
        )
    kind_names = sorted(kinds)
    print("\nmedian µs by kind of URL:")
    print(f"{'policy':<14}" + "".join(f" {k:>14}" for k in kind_names))
    for label in policies:
        print(
            f"{label:<14}"
            + "".join(f" {median(kind_medians[(label, k)]):>14.2f}" for k in kind_names)
        )
    print()
    ratio = median(medians[large_label]) / median(medians[small_label])
    worst = max(median(medians[label]) for label in policies)
    print(
        f"ratio {large_label} / {small_label} (median): {ratio:.2f} "
        f"(target <= ~1, differences under 10-20% are noise)"
    )
    print(
        f"worst median {worst:.2f} µs per decision "
        f"(target < {TARGET_MEDIAN_US:.0f} µs: {'met' if worst < TARGET_MEDIAN_US else 'MISSED'})"
    )
    print(f"load of the {large_label} policy: {load_seconds * 1000:.0f} ms")


if __name__ == "__main__":
    main()
