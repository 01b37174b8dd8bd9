"""The decisions-over-time chart as geometry: stacked bars per time bucket (allowed, refused,
would be refused, failed) and a marker per policy reload, in SVG user units. The page draws
them as server-rendered SVG: no script, nothing fetched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.audit.fields import Disposition, format_time
from gateway.review.overview import Reload

WIDTH, HEIGHT = 960, 260
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 36
MAX_BARS = 120
STACK = (Disposition.ALLOW, Disposition.ERROR, Disposition.WOULD_DENY, Disposition.DENY)


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    decision: str
    label: str  # the tooltip: time span, decision, count


@dataclass(frozen=True, slots=True)
class Marker:
    x: float
    label: str
    failed: bool


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    y: float
    label: str
    anchor: str = "middle"  # SVG text-anchor: the end ticks stay inside the picture


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    markers: tuple[Marker, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    bucket_seconds: int
    empty: bool


def build_chart(
    buckets: Mapping[int, Counter[str]], bucket_seconds: int, reloads: Sequence[Reload]
) -> Chart:
    if not buckets:
        return Chart(WIDTH, HEIGHT, (), (), (), (), bucket_seconds, True)
    first, last = min(buckets), max(buckets)
    span = max(1, (last - first) // bucket_seconds + 1)
    step = bucket_seconds * max(1, -(-span // MAX_BARS))  # merge buckets to at most MAX_BARS
    merged: dict[int, Counter[str]] = {}
    for start, counts in buckets.items():
        merged.setdefault(first + (start - first) // step * step, Counter()).update(counts)
    slots = (last - first) // step + 1
    tallest = max(sum(counts.values()) for counts in merged.values()) or 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot_w = plot_w / slots
    bars: list[Bar] = []
    for start, counts in sorted(merged.items()):
        x = LEFT + (start - first) // step * slot_w
        base = float(TOP + plot_h)
        for decision in STACK:
            count = counts.get(decision, 0)
            if not count:
                continue
            height = count / tallest * plot_h
            base -= height
            label = f"{format_time(start)} + {_duration(step)}: {count} {decision}"
            bars.append(Bar(x + 0.5, base, max(1.0, slot_w - 1), height, decision, label))
    end = first + slots * step

    def x_of(moment: float) -> float:
        return LEFT + (moment - first) / (end - first) * plot_w

    markers = tuple(
        Marker(
            x_of(reload.timestamp),
            f"policy reload at {format_time(reload.timestamp)}: {reload.policy} "
            f"({reload.sha256[:12]}), {reload.outcome}",
            reload.outcome != "success",
        )
        for reload in reloads
        if first <= reload.timestamp <= end
    )
    x_ticks = tuple(
        Tick(
            x_of(first + i * (end - first) / 4),
            HEIGHT - 12,
            format_time(first + i * (end - first) / 4),
            "start" if i == 0 else "end" if i == 4 else "middle",
        )
        for i in range(5)
    )
    y_ticks = tuple(
        Tick(LEFT - 6, TOP + plot_h - plot_h * i / 4, str(round(tallest * i / 4)), "end")
        for i in range(5)
    )
    return Chart(WIDTH, HEIGHT, tuple(bars), markers, x_ticks, y_ticks, step, False)


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"
