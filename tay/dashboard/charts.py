"""The dashboard's charts as plain SVG geometry (no JavaScript, no library).

``throughput(per_minute)`` turns the activity op's 60 rows into polyline points for the
enqueued, completed and failed series on one shared scale, plus axis labels;
``latency(queue_latency)`` does the same for each queue's latency per minute (ms), and
``queue_throughput(queue_throughput)`` for the jobs each queue completed per minute, and
``history(days)`` for the history op's rows, one a UTC day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

WIDTH, HEIGHT = 1160, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 10, 10, 22
SERIES = ("enqueued", "completed", "failed")


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot: tuple[int, int, int, int]  # left, top, right, bottom
    peak: int
    grid: list[tuple[float, int]]  # (y, value)
    lines: dict[str, str]  # series -> "x,y x,y ..."
    totals: dict[str, int]  # series -> its sum (throughput) or its peak (latency)
    ticks: list[tuple[float, str]]  # (x, label)


def _nice_peak(value: int) -> int:
    """Four grid steps of 1, 2 or 5 x 10^n that reach ``value`` (at least 0..4)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if 4 * factor * step >= value:
                return 4 * factor * step
        step *= 10


# grid steps (ms) of a duration scale: each multiple up to 4 is a whole number of ms,
# seconds, minutes, hours or days (``tay.dashboard.format.axis_duration``)
_DURATION_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 250, 500,
                   1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
                   60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
                   3_600_000, 7_200_000, 21_600_000, 43_200_000,
                   86_400_000, 172_800_000, 432_000_000, 864_000_000)


def _nice_duration_peak(value: int) -> int:
    """Four grid steps of a duration (``_DURATION_STEPS``) that reach ``value`` ms (at
    least 0..4 ms); past the longest step, ``_nice_peak``'s."""
    for step in _DURATION_STEPS:
        if 4 * step >= value:
            return 4 * step
    return _nice_peak(value)


def throughput(per_minute: list[dict[str, Any]]) -> Chart:
    rows = per_minute or [{name: 0 for name in SERIES}]
    values = {name: [row[name] for row in rows] for name in SERIES}
    return _chart(values, {name: sum(counts) for name, counts in values.items()})


def latency(queue_latency: list[dict[str, Any]]) -> Chart:
    """One line per queue (the activity op's ``queue_latency``), in ms on one scale whose
    grid steps are whole durations (15 s, 2 min, 6 h...), so that each grid label is short
    (``format.axis_duration``): 50 s steps labelled 1 min 40 s and 3 min 20 s overflowed
    the axis margin."""
    values = {row["queue"]: row["per_minute"] for row in queue_latency}
    top = max((max(series, default=0) for series in values.values()), default=0)
    return _chart(values, {row["queue"]: row["peak_ms"] for row in queue_latency},
                  _nice_duration_peak(top))


def queue_throughput(series: list[dict[str, Any]]) -> Chart:
    """One line per queue (the activity op's ``queue_throughput``): jobs completed a minute,
    on one scale; the totals are each queue's completed jobs in the hour."""
    values = {row["queue"]: row["completed_per_minute"] for row in series}
    return _chart(values, {row["queue"]: row["completed"] for row in series})


def history(days: list[dict[str, Any]]) -> Chart:
    """The enqueued, completed and failed series a day (the history op's rows, oldest
    first), the oldest, middle and last day (today) as ticks."""
    rows = days or [{"day": 0, **{name: 0 for name in SERIES}}]
    values = {name: [row[name] for row in rows] for name in SERIES}
    chart = _chart(values, {name: sum(counts) for name, counts in values.items()})
    # where _chart puts its ticks: the first, middle ((n - 1) // 2) and last row
    labels = [_date(rows[0]["day"]), _date(rows[(len(rows) - 1) // 2]["day"]), "today"]
    return replace(chart, ticks=[(x, label) for (x, _), label in zip(chart.ticks, labels)])


def _date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%b %d")


def _chart(values: dict[str, list[int]], totals: dict[str, int],
           peak: int | None = None) -> Chart:
    """Series of one length each (one value a minute, oldest first) on a shared scale (up
    to ``peak``, a multiple of 4; by default ``_nice_peak`` of the highest value)."""
    length = max((len(series) for series in values.values()), default=1)
    if peak is None:
        peak = _nice_peak(max((max(series, default=0) for series in values.values()),
                              default=0))
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    span = max(length - 1, 1)

    def x(index: int) -> float:
        return round(left + (right - left) * index / span, 1)

    def y(count: int) -> float:
        return round(bottom - (bottom - top) * count / peak, 1)

    lines = {name: " ".join(f"{x(i)},{y(value)}" for i, value in enumerate(series))
             for name, series in values.items()}
    grid = [(y(peak * k // 4), peak * k // 4) for k in range(5)]  # exact: peak % 4 == 0
    last = length - 1
    ticks = [(x(0), f"-{last} min"), (x(last // 2), f"-{last - last // 2} min"), (x(last), "now")]
    return Chart(WIDTH, HEIGHT, (left, top, right, bottom), peak, grid, lines, totals, ticks)
