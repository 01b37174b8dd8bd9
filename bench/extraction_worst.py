"""Worst-case extraction: synthetic large or odd pages, each in a fresh process.

Reports seconds and the child's peak RSS for our extractor (and trafilatura with
`--trafilatura`), so regressions in the hostile-input bounds show up as numbers, not as
timed test assertions. The cases follow the research notes (extraction.md, section 2.3).

    .venv/bin/python bench/extraction_worst.py [--trafilatura] [--deadline SECONDS]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _article_paragraphs() -> bytes:
    paragraphs = b"".join(
        b"<p>Paragraph %d says something distinct, with commas, in it.</p>" % i
        for i in range(100_000)
    )
    return b"<html><body><article>" + paragraphs + b"</article></body></html>"


def _big_table() -> bytes:
    row = b"<tr>" + b"".join(b"<td>c%d</td>" % j for j in range(10)) + b"</tr>"
    return b"<table>" + row * 20_000 + b"</table>"


CASES: dict[str, Callable[[], bytes]] = {
    "100k distinct <p> in <article>": _article_paragraphs,
    "table, 200k cells": _big_table,
    "100k links": lambda: b"<div>" + b"".join(
        b'<a href="/l%d">link %d</a> ' % (i, i) for i in range(100_000)
    ) + b"</div>",
    "20k nested <div>": lambda: b"<div>" * 20_000 + b"deep" + b"</div>" * 20_000,
    "10 MB of one paragraph": lambda: b"<body>" + b"<p>The same words, again and again.</p>"
    * 290_000,
    "10 MB of <div>": lambda: b"<div>" * 2_000_000,
    "5 MB class attribute": lambda: b'<p class="' + b"a" * 5_000_000 + b'">x</p>',
    "10 MB binary junk": lambda: bytes(range(256)) * 40_000,
}


def _run(name: str, extractor: str, deadline: float | None, queue: multiprocessing.Queue) -> None:
    sys.path.insert(0, str(REPO))
    body = CASES[name]()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    try:
        if extractor == "ours":
            from gateway.extract import extract

            outcome = f"{len(extract(body, 'text/html', deadline_s=deadline).text)} chars"
        else:
            import trafilatura

            outcome = f"{len(trafilatura.extract(body, include_comments=False) or '')} chars"
    except Exception as exc:  # the outcome is what we report
        outcome = f"{type(exc).__name__}: {exc}"
    seconds = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put((len(body), seconds, peak // 1024, (peak - before) // 1024, outcome))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trafilatura", action="store_true", help="also run trafilatura")
    parser.add_argument("--deadline", type=float, default=None, help="deadline_s for ours")
    args = parser.parse_args()
    extractors = ["ours"] + (["trafilatura"] if args.trafilatura else [])
    context = multiprocessing.get_context("spawn")
    print(f"{'case':<32} {'extractor':<12} {'MB':>5} {'CPU s':>6} {'peak MiB':>8} "
          f"{'+MiB':>5}  outcome")
    for name in CASES:
        for extractor in extractors:
            queue: multiprocessing.Queue = context.Queue()
            process = context.Process(target=_run, args=(name, extractor, args.deadline, queue))
            process.start()
            size, seconds, peak, grown, outcome = queue.get()
            process.join()
            print(f"{name:<32} {extractor:<12} {size / 1e6:>5.1f} {seconds:>6.2f} {peak:>8} "
                  f"{grown:>5}  {outcome}")


if __name__ == "__main__":
    main()
