"""Extraction quality and speed on two data sets, the gateway's extractor beside trafilatura.

- **WCXB dev** (`../shared/extbench/wcxb-dev`, 1,497 pages of seven page types), scored as its
  authors score it: per page, lower-cased `\\w+` words compared as multisets (precision,
  recall, F1 of the overlap), an empty answer scores 0, the figure is the mean over pages,
  overall and per page type. Markdown is scored after link syntax (`[text](url)` -> `text`)
  and code-fence info strings are removed.
- **scrapinghub** (`../shared/extbench/scrapinghub`, 181 news and blog pages), scored as its
  evaluate.py does: `\\w+` tokens in 4-token shingles compared as multisets, per-page counts
  normalised to sum 1, precision averaged over pages with output, recall over pages with
  truth, F1 the harmonic mean of the two averages.

The gateway side is `gateway.cli.extract_cmd.extract_page`, the function `gateway extract`
runs, in `text` and `auto` mode; trafilatura runs with its defaults (text output). Pages are
spread over a process pool (`--workers`, default the CPU count); every page runs all
extractors in turn in one worker (the order rotating from page to page), and each call is
timed in that worker's CPU seconds, so pages/s is per core and the ratios compare like with
like. `--every N` scores every Nth page
only (for quick iterations; report full runs).

    .venv/bin/python bench/extraction.py [--sets wcxb scrapinghub] [--every N] [--workers N]
        [--no-trafilatura] [--worst N] [--dump FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# `../shared/extbench` from the repository root (or from the folder above, for a work tree
# checked out one level deeper)
SHARED = next(
    (up / "shared" / "extbench" for up in REPO.parents[:2] if (up / "shared" / "extbench").is_dir()),
    REPO.parent / "shared" / "extbench",
)
CONTENT_TYPE = "text/html; charset=utf-8"
_TOKEN = re.compile(r"\w+", re.UNICODE)
# Markdown link syntax -> its text; image syntax -> its alt text; fence info strings dropped
_MD_LINK = re.compile(r"!?\[((?:\\.|[^\]\\])*)\]\((?:<[^>\n]*>|[^)\n]*)\)")
_MD_FENCE_INFO = re.compile(r"^(\s*(?:```+|~~~+))[^\n`]*$", re.M)
GATEWAY_MODES = ("text", "auto")
TRAFILATURA = "trafilatura"


def markdown_for_scoring(text: str) -> str:
    return _MD_FENCE_INFO.sub(r"\1", _MD_LINK.sub(r"\1", text))


@dataclass(frozen=True, slots=True)
class Page:
    key: str
    path: Path  # the gzip-compressed HTML
    truth: str
    kind: str  # WCXB page type; "article" for scrapinghub


def wcxb_pages(data: Path) -> list[Page]:
    pages = []
    for truth_file in sorted((data / "ground-truth").glob("*.json")):
        record = json.loads(truth_file.read_text(encoding="utf-8"))
        key = truth_file.stem
        pages.append(Page(
            key,
            data / "html" / f"{key}.html.gz",
            record["ground_truth"].get("main_content") or "",
            record["_internal"]["page_type"]["primary"],
        ))
    return pages


def scrapinghub_pages(data: Path) -> list[Page]:
    truth = json.loads((data / "ground-truth.json").read_text(encoding="utf-8"))
    return [
        Page(key, data / "html" / f"{key}.html.gz", truth[key].get("articleBody") or "", "article")
        for key in sorted(truth)
    ]


# --- the worker side ----------------------------------------------------------------------

_EXTRACTORS: dict[str, Callable[[bytes], str]] = {}


def _init_worker(names: tuple[str, ...]) -> None:
    sys.path.insert(0, str(REPO))
    from gateway.cli.extract_cmd import extract_page

    for name in names:
        if name == TRAFILATURA:
            import trafilatura

            _EXTRACTORS[name] = lambda html: trafilatura.extract(html) or ""
        else:
            mode = name.removeprefix("gateway ")
            _EXTRACTORS[name] = lambda html, mode=mode: extract_page(html, CONTENT_TYPE, mode).text
    warm = b"<html><body><article><p>Warm-up, with some words.</p></article></body></html>"
    for run in _EXTRACTORS.values():
        run(warm)


def _run_page(job: tuple[int, Path]) -> tuple[int, dict[str, tuple[str, float]]]:
    number, path = job
    html = gzip.decompress(path.read_bytes())
    results = {}
    # the order rotates page by page: whoever runs first on a page pays for cold caches
    names = list(_EXTRACTORS)
    turn = number % len(names)
    for name in names[turn:] + names[:turn]:
        run = _EXTRACTORS[name]
        start = time.process_time()
        try:
            text = run(html)
        except Exception as exc:  # an extractor's failure is an empty answer, and said
            print(f"{path.name}: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            text = ""
        results[name] = (text, time.process_time() - start)
    return len(html), results


# --- scoring ------------------------------------------------------------------------------


def word_prf(truth: str, predicted: str) -> tuple[float, float, float]:
    """WCXB's per-page word precision, recall and F1 (an empty answer scores 0)."""
    t = Counter(_TOKEN.findall(truth.lower()))
    p = Counter(_TOKEN.findall(predicted.lower()))
    if not p or not t:
        return (0.0, 0.0, 0.0) if t or p else (1.0, 1.0, 1.0)
    overlap = sum((t & p).values())
    precision, recall = overlap / sum(p.values()), overlap / sum(t.values())
    f1 = 2 * precision * recall / (precision + recall) if overlap else 0.0
    return precision, recall, f1


def _shingles(text: str, n: int = 4) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN.findall(text or "")
    return Counter(
        tuple(tokens[i : i + n]) for i in range(max(1, len(tokens) - n + 1)) if tokens[i : i + n]
    )


def shingle_counts(truth: str, predicted: str) -> tuple[float, float, float]:
    """scrapinghub's per-page (tp, fp, fn) over 4-token shingles, normalised to sum 1."""
    t, p = _shingles(truth), _shingles(predicted)
    tp = float(sum((t & p).values()))
    fp = float(sum((p - t).values()))
    fn = float(sum((t - p).values()))
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def scrapinghub_score(counts: Iterable[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(F1, precision, recall) as scrapinghub's evaluate.py averages them."""
    counts = list(counts)

    def precision(tp: float, fp: float, fn: float) -> float:
        return 1.0 if fp == fn == 0 else (0.0 if tp == fp == 0 else tp / (tp + fp))

    def recall(tp: float, fp: float, fn: float) -> float:
        return 1.0 if fp == fn == 0 else (0.0 if tp == fn == 0 else tp / (tp + fn))

    p = statistics.mean(precision(*c) for c in counts if c[0] + c[1] > 0)
    r = statistics.mean(recall(*c) for c in counts if c[0] + c[2] > 0)
    return (2 * p * r / (p + r) if p + r else 0.0), p, r


@dataclass
class Outcome:
    """One extractor on one data set: its answers and CPU seconds per page."""

    texts: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    empty: int = 0


def run_set(
    pages: list[Page], names: tuple[str, ...], workers: int
) -> tuple[dict[str, Outcome], int]:
    outcomes = {name: Outcome() for name in names}
    size = 0
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(names,)) as pool:
        for page, (length, results) in zip(
            pages,
            pool.map(_run_page, list(enumerate(page.path for page in pages)), chunksize=4),
            strict=True,
        ):
            size += length
            for name, (text, seconds) in results.items():
                outcome = outcomes[name]
                if name == "gateway auto":
                    text = markdown_for_scoring(text)
                outcome.texts[page.key] = text
                outcome.seconds += seconds
                outcome.empty += not text.strip()
    return outcomes, size


def _pages_per_s(outcome: Outcome, pages: int) -> float:
    return pages / outcome.seconds if outcome.seconds else float("inf")


def report_wcxb(pages: list[Page], outcomes: dict[str, Outcome], size: int, worst: int) -> None:
    kinds = sorted({page.kind for page in pages}, key=lambda k: (-sum(p.kind == k for p in pages), k))
    names = list(outcomes)
    per_page = {
        name: {page.key: word_prf(page.truth, outcomes[name].texts[page.key]) for page in pages}
        for name in names
    }
    print(f"\nWCXB dev: {len(pages)} pages, {size / 1e6:.1f} MB of HTML (word-F1, WCXB's metric)\n")
    print("| extractor | word-F1 | precision | recall | empty | pages/s (one core) | vs trafilatura |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = outcomes.get(TRAFILATURA)
    for name in names:
        scores = per_page[name].values()
        f1 = statistics.mean(s[2] for s in scores)
        precision = statistics.mean(s[0] for s in scores)
        recall = statistics.mean(s[1] for s in scores)
        speed = _pages_per_s(outcomes[name], len(pages))
        ratio = f"{base.seconds / outcomes[name].seconds:.1f}x" if base and outcomes[name].seconds else ""
        print(f"| {name} | {f1:.3f} | {precision:.3f} | {recall:.3f} | {outcomes[name].empty} "
              f"| {speed:.1f} | {ratio} |")
    print("\n| type (pages) | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    for kind in kinds:
        keys = [page.key for page in pages if page.kind == kind]
        cells = [statistics.mean(per_page[name][key][2] for key in keys) for name in names]
        print(f"| {kind} ({len(keys)}) | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    if TRAFILATURA in outcomes:
        for name in names:
            if name == TRAFILATURA:
                continue
            losses = []
            for kind in kinds:
                keys = [page.key for page in pages if page.kind == kind]
                ours = statistics.mean(per_page[name][key][2] for key in keys)
                theirs = statistics.mean(per_page[TRAFILATURA][key][2] for key in keys)
                if ours < theirs - 0.03:
                    losses.append(f"{kind} {ours - theirs:+.3f}")
            overall = statistics.mean(s[2] for s in per_page[name].values())
            traf = statistics.mean(s[2] for s in per_page[TRAFILATURA].values())
            verdict = "met" if overall >= traf and not losses and outcomes[name].empty <= outcomes[TRAFILATURA].empty else "MISSED"
            print(f"target {name}: word-F1 >= trafilatura's, no type > 0.03 below, empties <= "
                  f"trafilatura's: {verdict}" + (f" ({', '.join(losses)})" if losses else ""))
    if worst:
        first = names[0]
        print(f"\nworst WCXB pages of {first} (type, F1, precision, recall"
              + (", trafilatura F1" if TRAFILATURA in per_page else "") + "):")
        kind_of = {page.key: page.kind for page in pages}
        ranked = sorted(per_page[first].items(), key=lambda item: item[1][2])[:worst]
        for key, (p, r, f1) in ranked:
            traf = f" {per_page[TRAFILATURA][key][2]:.3f}" if TRAFILATURA in per_page else ""
            print(f"  {key} {kind_of[key]:<13} {f1:.3f} {p:.3f} {r:.3f}{traf}")


def report_scrapinghub(pages: list[Page], outcomes: dict[str, Outcome], size: int) -> None:
    print(f"\nscrapinghub: {len(pages)} pages, {size / 1e6:.1f} MB of HTML (4-shingle F1)\n")
    print("| extractor | F1 | precision | recall | MB/s (one core) | vs trafilatura |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base = outcomes.get(TRAFILATURA)
    verdicts = []
    for name, outcome in outcomes.items():
        f1, precision, recall = scrapinghub_score(
            shingle_counts(page.truth, outcome.texts[page.key]) for page in pages
        )
        speed = size / 1e6 / outcome.seconds if outcome.seconds else float("inf")
        ratio = f"{base.seconds / outcome.seconds:.1f}x" if base and outcome.seconds else ""
        print(f"| {name} | {f1:.3f} | {precision:.3f} | {recall:.3f} | {speed:.1f} | {ratio} |")
        if name.startswith("gateway"):
            verdict = "met" if f1 >= 0.96 and precision >= 0.95 else "MISSED"
            verdicts.append(f"target {name}: F1 >= 0.96 and precision >= 0.95: {verdict}")
    print("\n".join(verdicts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", choices=("wcxb", "scrapinghub"),
                        default=["wcxb", "scrapinghub"])
    parser.add_argument("--wcxb", type=Path,
                        default=Path(os.environ.get("WCXB_DIR", SHARED / "wcxb-dev")))
    parser.add_argument("--scrapinghub", type=Path,
                        default=Path(os.environ.get("EXTBENCH_DIR", SHARED / "scrapinghub")))
    parser.add_argument("--every", type=int, default=1, help="score every Nth page only")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--modes", nargs="+", choices=GATEWAY_MODES, default=list(GATEWAY_MODES))
    parser.add_argument("--no-trafilatura", action="store_true", help="only the gateway")
    parser.add_argument("--worst", type=int, default=0, help="list the N worst WCXB pages")
    parser.add_argument("--type", help="only WCXB pages of this type")
    parser.add_argument("--dump", type=Path, help="write every answer as JSON here")
    args = parser.parse_args()
    names = tuple(f"gateway {mode}" for mode in args.modes)
    if not args.no_trafilatura:
        names += (TRAFILATURA,)
    dump: dict[str, dict[str, dict[str, str]]] = {}
    if "wcxb" in args.sets:
        if not (args.wcxb / "ground-truth").is_dir():
            sys.exit(f"no WCXB data at {args.wcxb} (set --wcxb or WCXB_DIR)")
        pages = wcxb_pages(args.wcxb)[:: args.every]
        if args.type:
            pages = [page for page in pages if page.kind == args.type]
        outcomes, size = run_set(pages, names, args.workers)
        report_wcxb(pages, outcomes, size, args.worst)
        dump["wcxb"] = {name: outcome.texts for name, outcome in outcomes.items()}
    if "scrapinghub" in args.sets:
        if not (args.scrapinghub / "ground-truth.json").is_file():
            sys.exit(f"no scrapinghub data at {args.scrapinghub} (set --scrapinghub)")
        pages = scrapinghub_pages(args.scrapinghub)[:: args.every]
        outcomes, size = run_set(pages, names, args.workers)
        report_scrapinghub(pages, outcomes, size)
        dump["scrapinghub"] = {name: outcome.texts for name, outcome in outcomes.items()}
    if args.dump:
        args.dump.write_text(json.dumps(dump, ensure_ascii=False))


if __name__ == "__main__":
    main()
