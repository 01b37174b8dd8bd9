"""The chart's geometry: stacked bars within the picture, reloads where they happened."""

from __future__ import annotations

from collections import Counter

from gateway.review.chart import BOTTOM, HEIGHT, MAX_BARS, TOP, WIDTH, build_chart
from gateway.review.overview import Reload

T0 = 1_800_000_000


def test_bars_stack_and_stay_inside() -> None:
    buckets = {T0: Counter(allow=3, deny=1), T0 + 60: Counter(deny=4), T0 + 600: Counter(error=2)}
    chart = build_chart(buckets, 60, [Reload(T0 + 90, "success", "p", "ab" * 32)])
    assert not chart.empty
    assert sum(1 for bar in chart.bars) == 4
    for bar in chart.bars:
        assert (
            bar.x >= 0
            and bar.x + bar.width <= WIDTH
            and bar.y >= 0
            and bar.y + bar.height <= HEIGHT + 0.01
        )
    first = [b for b in chart.bars if b.x == chart.bars[0].x]
    assert {b.decision for b in first} == {"allow", "deny"}
    # Both first buckets hold 4 records, the most of any: each fills the plot's height.
    plot_height = HEIGHT - TOP - BOTTOM
    assert abs(sum(b.height for b in first) - plot_height) < 1e-6
    [second] = [b for b in chart.bars if b.x > first[0].x and b.decision == "deny"]
    assert abs(second.height - plot_height) < 1e-6
    [failed] = [b for b in chart.bars if b.decision == "error"]
    assert abs(failed.height - plot_height / 2) < 1e-6
    [marker] = chart.markers
    assert chart.bars[0].x < marker.x < chart.bars[-1].x
    assert "policy reload" in marker.label and not marker.failed


def test_many_buckets_are_merged_to_at_most_max_bars() -> None:
    buckets = {T0 + i * 60: Counter(allow=1) for i in range(1000)}
    chart = build_chart(buckets, 60, [])
    assert len(chart.bars) <= MAX_BARS
    assert chart.bucket_seconds % 60 == 0 and chart.bucket_seconds > 60


def test_no_records_no_bars() -> None:
    assert build_chart({}, 60, []).empty
