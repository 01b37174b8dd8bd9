"""Outbound DLP: false positives on real URLs, recall on planted secrets, and its cost.

- **Real URLs**: every link (`a`/`area`/`link` href, `img`/`script`/`iframe`/`source` src)
  of the HTML pages of both extraction benchmark sets (`--extbench`, or `$EXTBENCH`; by
  default `../shared/extbench` from the repository root), resolved against the page's URL,
  http(s) only, fragments dropped, each distinct URL once. The shipped detectors (`dlp:
  {mode: report}`: every known format, entropy in host labels) must flag fewer than 0.1%
  of them; the entropy detector in paths and queries (opt-in) is measured on its own, and
  each flagged URL's detector is counted.
- **Planted secrets**: a generated corpus (seeded, deterministic): one secret per detector
  (every known format, a canary, a custom pattern, a high-entropy string) planted in each
  position (path segment, query value, a URL without fragment, host label, header, body
  prefix) as written, percent-encoded, base64- and hex-wrapped; every one must be caught.
  Host labels are lower case and at most 63 characters, so there a secret is planted only
  in the forms a host can carry (the entropy string, base32-style lower-case wrapping).
- **Cost**: `decide_url` on the real URLs with DLP off and on (report mode, so every URL
  gets the same decision path), interleaved per batch; DLP's added median must stay under
  half the median decision. Linearity: the added cost per URL for URLs of 100, 1,000 and
  8,000 characters, per character (a flat row is linear).

    .venv/bin/python bench/dlp.py [--extbench DIR] [--rounds 3] [--max-pages N]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import random
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

from common import median
from lxml import html as lxml_html

from gateway.policy.dlp import (
    CANARY,
    ENTROPY,
    CustomPattern,
    DlpMode,
    DlpSettings,
    EntropySettings,
)
from gateway.policy.engine import decide_url
from gateway.policy.load import load_policy_bytes
from gateway.policy.model import Policy

REPO = Path(__file__).resolve().parent.parent
DEFAULT_EXTBENCH = REPO.parent / "shared" / "extbench"
LINK_ATTRIBUTES = {
    "a": "href",
    "area": "href",
    "link": "href",
    "img": "src",
    "script": "src",
    "iframe": "src",
    "source": "src",
}
FP_TARGET = 0.001
COST_TARGET = 0.5
BATCH = 500


# --- real URLs ---------------------------------------------------------------------------------


def pages(root: Path, limit: int | None) -> Iterator[tuple[str, bytes]]:
    """(page URL, HTML bytes) of both sets."""
    count = 0
    scrapinghub = root / "scrapinghub"
    truth = json.loads((scrapinghub / "ground-truth.json").read_text())
    for page_id, entry in sorted(truth.items()):
        file = scrapinghub / "html" / f"{page_id}.html.gz"
        if file.exists():
            yield entry["url"], gzip.decompress(file.read_bytes())
            count += 1
            if limit and count >= limit:
                return
    wcxb = root / "wcxb-dev"
    for file in sorted((wcxb / "html").glob("*.html.gz")):
        meta = wcxb / "ground-truth" / (file.name.removesuffix(".html.gz") + ".json")
        url = json.loads(meta.read_text()).get("url") if meta.exists() else None
        if url:
            yield url, gzip.decompress(file.read_bytes())
            count += 1
            if limit and count >= limit:
                return


def links(root: Path, limit: int | None) -> list[str]:
    seen: dict[str, None] = {}
    for base, data in pages(root, limit):
        try:
            tree = lxml_html.fromstring(data)
        except (ValueError, lxml_html.etree.ParserError):
            continue
        for element in tree.iter(*LINK_ATTRIBUTES):
            value = element.get(LINK_ATTRIBUTES[element.tag])
            if not value:
                continue
            try:
                url = urljoin(base, value.strip()).partition("#")[0]
                scheme = urlsplit(url).scheme
            except ValueError:
                continue
            if scheme in ("http", "https") and len(url) <= 8192:
                seen.setdefault(url, None)
    return list(seen)


# --- the planted corpus ------------------------------------------------------------------------

CANARY_TEXT = "tripwire-4c1f7a2b9e"
CUSTOM = CustomPattern("employee_id", r"EMP-[0-9]{8}")


def secrets(rng: random.Random) -> dict[str, str]:
    """One secret per detector, shaped as the real ones are."""
    alnum = string.ascii_letters + string.digits

    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    def mixed(n: int) -> str:
        while True:
            text = pick(alnum, n)
            cases = (str.isupper, str.islower, str.isdigit)
            if all(any(test(c) for c in text) for test in cases):
                return text

    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(b'{"sub":"agent","admin":true}').decode().rstrip("=")
    pair = base64.b64encode(b"deploy:" + pick(alnum, 14).encode()).decode()
    return {
        "aws_access_key": "AKIA" + pick(string.ascii_uppercase + string.digits, 16),
        "github_token": "ghp_" + pick(alnum, 36),
        "gitlab_token": "glpat-" + pick(alnum, 20),
        "slack_token": "xoxb-" + pick(string.digits, 12) + "-" + pick(alnum, 24),
        "stripe_key": "sk_live_" + pick(alnum, 24),
        "openai_key": "sk-proj-" + mixed(48),
        "google_api_key": "AIza" + pick(alnum + "_-", 35),
        "private_key": "-----BEGIN RSA PRIVATE KEY-----",
        "jwt": f"{header}.{claims}.{pick(alnum + '_-', 43)}",
        "basic_auth": f"Basic {pair}",
        CANARY: CANARY_TEXT,
        CUSTOM.name: "EMP-" + pick(string.digits, 8),
        ENTROPY: pick(string.ascii_lowercase + string.digits, 40),
    }


def wrappings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "as written": secret,
        "percent-encoded": "".join(f"%{b:02X}" for b in raw),
        "base64": base64.b64encode(b"data=" + raw).decode(),
        "hex": (b"v=" + raw).hex(),
    }


def host_forms(detector: str, secret: str) -> dict[str, str]:
    """What a host label can carry: letters, digits and hyphens, up to 63 characters."""
    if detector == ENTROPY:
        return {"as written": secret}
    forms = {"as written": secret, "hex": secret.encode().hex()}
    forms["base64"] = base64.urlsafe_b64encode(secret.encode()).decode().rstrip("=")
    return {
        form: label
        for form, label in forms.items()
        if len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label)
    }


def plant(settings: DlpSettings, rng: random.Random) -> tuple[int, list[str]]:
    """(cases, missed) over every detector, position and wrapping."""
    cases = 0
    missed: list[str] = []
    for detector, secret in secrets(rng).items():
        for form, text in wrappings(secret).items():
            query_value = quote(text, safe="") if form != "percent-encoded" else text
            path_value = query_value.replace("%2F", "/") if form == "base64" else query_value
            checks = {
                "path": ("url", f"https://docs.example.org/files/{path_value}"),
                "query": ("url", f"https://search.example.org/find?lang=en&q={query_value}&p=2"),
                "URL without fragment": ("url", f"https://cdn.example.org/{query_value}#frag"),
                "header": ("header", text),
                "body prefix": ("body", f'{{"note": "{text}", "n": 1}}'),
            }
            for position, (kind, planted) in checks.items():
                if detector == ENTROPY and kind != "url":
                    continue  # the entropy detector looks at URLs only
                cases += 1
                if kind == "url":
                    found = settings.scan_url(planted)
                elif kind == "header":
                    found = settings.scan_headers([("Accept", "text/html"), ("X-Context", planted)])
                else:
                    found = settings.scan_body(planted.encode())
                if detector == ENTROPY and form != "as written" and found is None:
                    continue  # a wrapped random string is not a secret shape by itself
                if found is None or found.detector != detector and detector != ENTROPY:
                    missed.append(f"{detector} in {position} ({form})")
        for form, label in host_forms(detector, secret).items():
            cases += 1
            found = settings.scan_url(f"https://{label}.collector.example/x")
            if found is None or not found.location.startswith("host_label"):
                missed.append(f"{detector} in host label ({form})")
    return cases, missed


# --- cost --------------------------------------------------------------------------------------


def policies(canaries_file: str) -> dict[str, Policy]:
    """DLP off, the shipped setting (`mode: report`), with a canaries file, and with a custom
    pattern too (custom expressions have no literal to look for first: the dearest)."""
    base = "version: 1\nname: bench\ndefault: allow\n"
    texts = {
        "off": base,
        "shipped (report)": base + "dlp: {mode: report}\n",
        "+ canaries": base + f"dlp: {{mode: report, canaries_file: {json.dumps(canaries_file)}}}\n",
        "+ canaries + custom pattern": base
        + f"dlp:\n  mode: report\n  canaries_file: {json.dumps(canaries_file)}\n"
        f"  patterns: [{{name: {CUSTOM.name}, regex: {json.dumps(CUSTOM.regex)}}}]\n",
    }
    return {
        label: load_policy_bytes(text.encode(), source="<bench>", default_name="bench")[0]
        for label, text in texts.items()
    }


def time_batch(policy: Policy, urls: list[str]) -> list[int]:
    out = []
    clock = time.perf_counter_ns
    for url in urls:
        start = clock()
        decide_url(policy, url, tool=None)
        out.append(clock() - start)
    return out


def cost(variants: dict[str, Policy], urls: list[str], rounds: int) -> dict[str, float]:
    """Median ns per decision of each variant, medians over rounds; batches interleaved and
    the order rotated per batch."""
    per_round: dict[str, list[float]] = {label: [] for label in variants}
    labels = list(variants)
    for round_number in range(rounds):
        times: dict[str, list[int]] = {label: [] for label in variants}
        for start in range(0, len(urls), BATCH):
            batch = urls[start : start + BATCH]
            shift = (start // BATCH + round_number) % len(labels)
            for label in labels[shift:] + labels[:shift]:
                times[label].extend(time_batch(variants[label], batch))
        for label in labels:
            per_round[label].append(median(times[label]))
    return {label: median(values) for label, values in per_round.items()}


def linearity(off: Policy, on: Policy, rng: random.Random) -> list[tuple[int, float]]:
    """Added ns per character for URLs of growing length (query values of tracking-id
    shape, the costliest ordinary content)."""
    rows = []
    for length in (100, 1000, 8000):
        urls = []
        for _ in range(200):
            parts = []
            while sum(map(len, parts)) < length - 40:
                key = "".join(rng.choice(string.ascii_lowercase) for _ in range(5))
                value = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(20))
                parts.append(f"{key}={value}")
            urls.append(("https://www.example.com/p?" + "&".join(parts))[:length])
        extra = []
        for _ in range(3):
            base = median(time_batch(off, urls))
            extra.append(median(time_batch(on, urls)) - base)
        rows.append((length, median(extra) / length))
    return rows


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extbench", default=os.environ.get("EXTBENCH", str(DEFAULT_EXTBENCH)))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-pages", type=int, default=0, help="0: every page")
    args = parser.parse_args(argv)
    root = Path(args.extbench)
    if not (root / "scrapinghub").is_dir() or not (root / "wcxb-dev").is_dir():
        print(f"no extraction benchmark data under {root} (give --extbench DIR)")
        return 2
    rng = random.Random(18)

    started = time.perf_counter()
    urls = links(root, args.max_pages or None)
    print(f"real URLs: {len(urls)} distinct links ({time.perf_counter() - started:.1f} s)")
    shipped = DlpSettings(mode=DlpMode.REPORT)
    flagged = Counter(f.detector for u in urls if (f := shipped.scan_url(u)) is not None)
    total = sum(flagged.values())
    rate = total / len(urls) if urls else 0.0
    verdict = "met" if rate < FP_TARGET and len(urls) >= 100_000 else "MISSED"
    print(
        f"default detectors: {total} of {len(urls)} flagged = {rate:.4%} "
        f"(target < {FP_TARGET:.1%} on >= 100,000 URLs: {verdict})"
    )
    for detector, count in flagged.most_common():
        print(f"  {detector}: {count}")
    where_all = DlpSettings(
        mode=DlpMode.REPORT,
        detectors=(),
        entropy=EntropySettings(where=("path", "query")),
    )
    entropy_hits = sum(1 for u in urls if where_all.scan_url(u) is not None)
    entropy_rate = entropy_hits / len(urls) if urls else 0.0
    print(
        f"entropy detector on paths and queries (opt-in): {entropy_hits} of {len(urls)} "
        f"flagged = {entropy_rate:.3%}"
    )

    with tempfile.TemporaryDirectory() as folder:
        canaries_file = os.path.join(folder, "canaries.txt")
        Path(canaries_file).write_text(CANARY_TEXT + "\n")
        planted_settings = DlpSettings(
            mode=DlpMode.ENFORCE,
            canaries=(CANARY_TEXT,),
            patterns=(CUSTOM,),
            entropy=EntropySettings(where=("host_labels", "path", "query")),
        )
        cases, missed = plant(planted_settings, rng)
        print(
            f"planted secrets: {cases - len(missed)} of {cases} caught "
            f"({'met' if not missed else 'MISSED'})"
        )
        for miss in missed:
            print(f"  missed: {miss}")
        variants = policies(canaries_file)
        sample = urls[:20_000] if len(urls) > 20_000 else urls
        medians = cost(variants, sample, args.rounds)
    base_ns = medians["off"]
    print(f"cost: median decision without DLP {base_ns / 1000:.2f} µs (on {len(sample)} URLs)")
    for label, value in medians.items():
        if label == "off":
            continue
        ratio = (value - base_ns) / base_ns if base_ns else 0.0
        verdict = ""
        if label.startswith("shipped"):
            verdict = f" (target < {COST_TARGET}x: {'met' if ratio < COST_TARGET else 'MISSED'})"
        print(f"  {label}: adds {(value - base_ns) / 1000:.2f} µs = {ratio:.2f}x{verdict}")
    shipped = variants["shipped (report)"]
    for length, per_char in linearity(variants["off"], shipped, rng):
        print(f"  URL of {length} chars (shipped): DLP adds {per_char:.2f} ns per char")
    return 0


if __name__ == "__main__":
    sys.exit(main())
