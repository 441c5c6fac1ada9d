"""The overview's throughput chart as plain SVG geometry (no JavaScript, no library).

``throughput(per_minute)`` turns the activity op's 60 rows into polyline points for the
enqueued, completed and failed series on one shared scale, plus axis labels.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    totals: dict[str, int]
    ticks: list[tuple[float, str]]  # (x, label)


def _nice_peak(value: int) -> int:
    """Four grid steps of 1, 2 or 5 x 10^n that reach ``value`` (at least 0..4)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if 4 * factor * step >= value:
                return 4 * factor * step
        step *= 10


def throughput(per_minute: list[dict[str, Any]]) -> Chart:
    rows = per_minute or [{name: 0 for name in SERIES}]
    peak = _nice_peak(max(max(row[name] for name in SERIES) for row in rows))
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    span = max(len(rows) - 1, 1)

    def x(index: int) -> float:
        return round(left + (right - left) * index / span, 1)

    def y(count: int) -> float:
        return round(bottom - (bottom - top) * count / peak, 1)

    lines = {name: " ".join(f"{x(i)},{y(row[name])}" for i, row in enumerate(rows))
             for name in SERIES}
    grid = [(y(peak * k // 4), peak * k // 4) for k in range(5)]  # exact: peak % 4 == 0
    last = len(rows) - 1
    ticks = [(x(0), f"-{last} min"), (x(last // 2), f"-{last - last // 2} min"), (x(last), "now")]
    return Chart(WIDTH, HEIGHT, (left, top, right, bottom), peak, grid, lines,
                 {name: sum(row[name] for row in rows) for name in SERIES}, ticks)
