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
runs, in `text` and `auto` mode; trafilatura runs with its defaults (text output). The
gateway's text starts with the page's main heading and byline line when it found them: the
main content is scored without them (as trafilatura's text has no title, and as WCXB keeps
title, author and date apart from its main text), the rows `… +header` score the whole text,
and the heading and byline are scored on their own against WCXB's `title`, `author` and
`publish_date`. Images count as their alt text. `html-to-markdown` (a native whole-page
converter, when installed) is the speed yardstick of the Markdown path: it converts each
page whole, so its quality is context only. Pages are
spread over a process pool (`--workers`, default the CPU count); every page runs all
extractors in turn in one worker (the order rotating from page to page), and each call is
timed in that worker's CPU seconds, so pages/s is per core and the ratios compare like with
like. `--every N` scores every Nth page
only (for quick iterations; report full runs).

    .venv/bin/python bench/extraction.py [--sets wcxb scrapinghub] [--every N] [--workers N]
        [--no-trafilatura] [--no-html-to-markdown] [--worst N] [--dump FILE]
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
# Markdown image syntax -> its alt text, then link syntax -> its text (an image inside a link
# first); fence info strings dropped
_MD_IMAGE = re.compile(r"!\[((?:\\.|[^\]\\])*)\]\((?:<[^>\n]*>|[^)\n]*)\)")
_MD_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\((?:<[^>\n]*>|[^)\n]*)\)")
_MD_FENCE_INFO = re.compile(r"^(\s*(?:```+|~~~+))[^\n`]*$", re.M)
GATEWAY_MODES = ("text", "auto")
TRAFILATURA = "trafilatura"
HTML_TO_MARKDOWN = "html-to-markdown"
WHOLE = " +header"  # the gateway's whole text, heading and byline included
# what an extractor answers: its text, and the heading and byline the text starts with
Answer = tuple[str, str | None, str | None]


def markdown_for_scoring(text: str) -> str:
    return _MD_FENCE_INFO.sub(r"\1", _MD_LINK.sub(r"\1", _MD_IMAGE.sub(r"\1", text)))


@dataclass(frozen=True, slots=True)
class Page:
    key: str
    path: Path  # the gzip-compressed HTML
    truth: str
    kind: str  # WCXB page type; "article" for scrapinghub
    # WCXB's metadata fields ("" when absent, and for scrapinghub)
    title: str = ""
    author: str = ""
    date: str = ""


def wcxb_pages(data: Path) -> list[Page]:
    pages = []
    for truth_file in sorted((data / "ground-truth").glob("*.json")):
        record = json.loads(truth_file.read_text(encoding="utf-8"))
        key = truth_file.stem
        truth = record["ground_truth"]
        pages.append(Page(
            key,
            data / "html" / f"{key}.html.gz",
            truth.get("main_content") or "",
            record["_internal"]["page_type"]["primary"],
            str(truth.get("title") or ""),
            str(truth.get("author") or ""),
            str(truth.get("publish_date") or ""),
        ))
    return pages


def scrapinghub_pages(data: Path) -> list[Page]:
    truth = json.loads((data / "ground-truth.json").read_text(encoding="utf-8"))
    return [
        Page(key, data / "html" / f"{key}.html.gz", truth[key].get("articleBody") or "", "article")
        for key in sorted(truth)
    ]


# --- the worker side ----------------------------------------------------------------------

_EXTRACTORS: dict[str, Callable[[bytes], Answer]] = {}


def _gateway(mode: str) -> Callable[[bytes], Answer]:
    from gateway.cli.extract_cmd import extract_page

    def run(html: bytes) -> Answer:
        document = extract_page(html, CONTENT_TYPE, mode)
        return document.text, document.heading, document.byline

    return run


def _init_worker(names: tuple[str, ...]) -> None:
    sys.path.insert(0, str(REPO))
    for name in names:
        if name == TRAFILATURA:
            import trafilatura

            _EXTRACTORS[name] = lambda html: (trafilatura.extract(html) or "", None, None)
        elif name == HTML_TO_MARKDOWN:
            import html_to_markdown

            options = html_to_markdown.ConversionOptions(extract_metadata=False)
            # it takes text: decoding is part of its work, as parsing bytes is of ours
            _EXTRACTORS[name] = lambda html, options=options: (
                html_to_markdown.convert(html.decode("utf-8", "replace"), options).content or "",
                None, None,
            )
        else:
            _EXTRACTORS[name] = _gateway(name.removeprefix("gateway "))
    warm = b"<html><body><article><p>Warm-up, with some words.</p></article></body></html>"
    for run in _EXTRACTORS.values():
        run(warm)


def _run_page(job: tuple[int, Path]) -> tuple[int, dict[str, tuple[Answer, float]]]:
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
            answer = run(html)
        except Exception as exc:  # an extractor's failure is an empty answer, and said
            print(f"{path.name}: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            answer = ("", None, None)
        results[name] = (answer, time.process_time() - start)
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
    # the heading and byline each page's text starts with (the gateway's only)
    headers: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


def main_content(answer: Answer) -> str:
    """The answer without the heading and byline its text starts with."""
    text, heading, byline = answer
    lead = bool(heading) + bool(byline)
    return text.split("\n\n", lead)[lead] if lead and text.count("\n\n") >= lead else (
        "" if lead else text
    )

def run_set(
    pages: list[Page], names: tuple[str, ...], workers: int
) -> tuple[dict[str, Outcome], int]:
    outcomes = {name: Outcome() for name in names}
    for name in names:
        if name.startswith("gateway"):
            outcomes[name + WHOLE] = Outcome()
    size = 0
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(names,)) as pool:
        for page, (length, results) in zip(
            pages,
            pool.map(_run_page, list(enumerate(page.path for page in pages)), chunksize=4),
            strict=True,
        ):
            size += length
            for name, (answer, seconds) in results.items():
                texts = [(name, main_content(answer))]
                if name.startswith("gateway"):
                    texts.append((name + WHOLE, answer[0]))
                    outcomes[name].headers[page.key] = answer[1:]
                for key, text in texts:
                    outcome = outcomes[key]
                    if key.startswith("gateway auto") or key == HTML_TO_MARKDOWN:
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
            if not name.startswith("gateway"):
                continue
            losses = []
            for kind in kinds:
                keys = [page.key for page in pages if page.kind == kind]
                ours = statistics.mean(per_page[name][key][2] for key in keys)
                theirs = statistics.mean(per_page[TRAFILATURA][key][2] for key in keys)
                if ours < theirs:
                    losses.append(f"{kind} {ours - theirs:+.3f}")
            overall = statistics.mean(s[2] for s in per_page[name].values())
            verdict = "met" if overall >= 0.90 and not losses and outcomes[name].empty <= outcomes[TRAFILATURA].empty else "MISSED"
            print(f"target {name}: word-F1 >= 0.90 ({overall:.3f}), no type below trafilatura's, "
                  f"empties <= trafilatura's: {verdict}" + (f" ({', '.join(losses)})" if losses else ""))
    report_speed(outcomes)
    report_header(pages, outcomes)
    if worst:
        first = names[0]
        print(f"\nworst WCXB pages of {first} (type, F1, precision, recall"
              + (", trafilatura F1" if TRAFILATURA in per_page else "") + "):")
        kind_of = {page.key: page.kind for page in pages}
        ranked = sorted(per_page[first].items(), key=lambda item: item[1][2])[:worst]
        for key, (p, r, f1) in ranked:
            traf = f" {per_page[TRAFILATURA][key][2]:.3f}" if TRAFILATURA in per_page else ""
            print(f"  {key} {kind_of[key]:<13} {f1:.3f} {p:.3f} {r:.3f}{traf}")


def report_speed(outcomes: dict[str, Outcome]) -> None:
    """The speed targets: >= 4x trafilatura, and Markdown within 1.5x of html-to-markdown."""
    for name, outcome in outcomes.items():
        if not name.startswith("gateway") or name.endswith(WHOLE) or not outcome.seconds:
            continue
        if TRAFILATURA in outcomes:
            ratio = outcomes[TRAFILATURA].seconds / outcome.seconds
            print(f"target {name}: >= 4x trafilatura's pages/s ({ratio:.1f}x): "
                  + ("met" if ratio >= 4 else "MISSED"))
        if name == "gateway auto" and HTML_TO_MARKDOWN in outcomes:
            ratio = outcome.seconds / outcomes[HTML_TO_MARKDOWN].seconds
            print(f"target {name}: CPU time <= 1.5x html-to-markdown's ({ratio:.2f}x): "
                  + ("met" if ratio <= 1.5 else "MISSED"))


def _words(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def report_header(pages: list[Page], outcomes: dict[str, Outcome]) -> None:
    """The heading against WCXB's `title`; the byline's names against `author`, its date
    against `publish_date` (the day)."""
    for name, outcome in outcomes.items():
        if outcome.headers and any(page.title for page in pages):
            _report_header(pages, name, outcome.headers)


def _report_header(
    pages: list[Page], name: str, headers: dict[str, tuple[str | None, str | None]]
) -> None:
    titled = [page for page in pages if page.title]
    headed = [page for page in titled if headers[page.key][0]]
    heading_f1 = [word_prf(page.title, headers[page.key][0] or "")[2] for page in headed]
    authored = [page for page in pages if page.author]
    bylined = [page for page in pages if headers[page.key][1]]
    with_names = [page for page in bylined if (headers[page.key][1] or "").startswith("By ")]

    def named(page: Page) -> bool:
        byline = set(_words(headers[page.key][1] or ""))
        wanted = _words(page.author)
        return bool(wanted) and sum(word in byline for word in wanted) >= 0.5 * len(wanted)

    dated = [page for page in pages if _ISO_DAY.match(page.date)]
    with_dates = [page for page in bylined if _ISO_DAY.search(headers[page.key][1] or "")]

    def right_day(page: Page) -> bool:
        found = _ISO_DAY.search(headers[page.key][1] or "")
        return bool(found) and found.group(0) == page.date[:10]

    def share(part: int, whole: int) -> str:
        return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"

    print(f"\n{name}, heading and byline against WCXB's title, author and date:")
    print(f"- heading: on {share(len(headed), len(titled))} pages with a title, word-F1 "
          f"{statistics.mean(heading_f1) if heading_f1 else 0:.3f} against it")
    print(f"- byline names: {share(sum(map(named, authored)), len(authored))} of the pages with "
          f"an author name them; {share(sum(map(named, with_names)), len(with_names))} of the "
          f"names given are the page's author")
    print(f"- byline date: {share(sum(map(right_day, dated)), len(dated))} of the pages with a "
          f"date give its day; {share(sum(map(right_day, with_dates)), len(with_dates))} of the "
          f"dates given are right")


_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


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
    report_speed(outcomes)


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
    parser.add_argument("--no-trafilatura", action="store_true", help="without trafilatura")
    parser.add_argument("--no-html-to-markdown", action="store_true",
                        help="without the html-to-markdown yardstick")
    parser.add_argument("--worst", type=int, default=0, help="list the N worst WCXB pages")
    parser.add_argument("--type", help="only WCXB pages of this type")
    parser.add_argument("--dump", type=Path, help="write every answer as JSON here")
    args = parser.parse_args()
    names = tuple(f"gateway {mode}" for mode in args.modes)
    if not args.no_trafilatura:
        names += (TRAFILATURA,)
    if not args.no_html_to_markdown and "auto" in args.modes:
        try:
            import html_to_markdown  # noqa: F401
        except ImportError:
            print("html-to-markdown is not installed: no Markdown speed yardstick", file=sys.stderr)
        else:
            names += (HTML_TO_MARKDOWN,)
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
