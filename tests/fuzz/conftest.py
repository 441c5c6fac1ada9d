"""Fuzzer settings and counters. ``TAY_FUZZ_EXAMPLES`` scales every fuzzer (``make fuzz``
sets it high); the counters of a run are printed at the end and, with ``TAY_FUZZ_REPORT``,
written as JSON (what went in: frames, HTTP requests, streams)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

COUNTS: Counter[str] = Counter()


def examples(default: int) -> int:
    """Examples per fuzzer: the short default, or the long run's count."""
    return int(os.environ.get("TAY_FUZZ_EXAMPLES", default))


@pytest.fixture(scope="session", autouse=True)
def fuzz_report():
    yield
    if not COUNTS:
        return
    line = ", ".join(f"{name} {count}" for name, count in sorted(COUNTS.items()))
    print(f"\nfuzz inputs: {line}")
    path = os.environ.get("TAY_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(dict(COUNTS), handle, indent=1, sort_keys=True)
