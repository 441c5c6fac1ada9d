"""Latency summaries: nearest-rank percentiles over a list of seconds, reported in ms."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in 0..1)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in 0..1, got {fraction}")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """count, mean, min, p50, p95, p99, p999 and max of a sample of durations, in ms."""
    ordered = sorted(seconds)
    if not ordered:
        return {"count": 0}
    as_ms = [value * 1000.0 for value in ordered]
    return {
        "count": len(as_ms),
        "mean": round(sum(as_ms) / len(as_ms), 4),
        "min": round(as_ms[0], 4),
        "p50": round(percentile(as_ms, 0.50), 4),
        "p95": round(percentile(as_ms, 0.95), 4),
        "p99": round(percentile(as_ms, 0.99), 4),
        "p999": round(percentile(as_ms, 0.999), 4),
        "max": round(as_ms[-1], 4),
    }


def rate(count: int, elapsed_s: float) -> float:
    """Items per second; a non-positive span is an error, not infinity."""
    if elapsed_s <= 0:
        raise ValueError(f"elapsed time must be positive, got {elapsed_s}")
    return count / elapsed_s
