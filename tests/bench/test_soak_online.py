"""benchmarks/soak_online.py on a tiny run: the online compactor, started as serve starts
it, compacts on its own while the injected clock expires jobs, and nothing is refused."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.scratch import scratch_dir


@pytest.mark.parametrize("writer", ["python", "c"])
def test_a_tiny_online_soak_compacts_and_expires_on_its_own(monkeypatch, capsys, writer):
    from benchmarks import soak_online
    from tay.server import finished_rounds
    monkeypatch.setattr(finished_rounds, "INTERVAL_S", 0.01)  # rounds within a run of a second
    scratch = scratch_dir("soak-online-")  # accepted by strict sync wherever the checkout is
    monkeypatch.setattr(soak_online, "SCRATCH", scratch)
    args = soak_online.build_parser().parse_args([
        "--jobs", "3000", "--jobs-per-hour", "1000", "--batch", "100", "--history-bytes",
        "1MiB", "--check-interval-s", "0.02", "--sample-every", "1000", "--writer", writer])
    result = asyncio.run(soak_online.soak(args))
    assert result["jobs_done"] == 3000 and result["refused"] == {}
    assert result["failures"] is None
    compactions = result["compactions"]
    assert compactions and {row["trigger"] for row in compactions} == {"automatic"}
    assert sum(row["expired_jobs"] for row in compactions) > 0
    assert all(row["reclaimed"] for row in compactions)
    last = result["samples"][-1]
    assert last["jobs"] == 3000 and last["retained_jobs"] < 3000
    assert 0 < last["packed_jobs"] <= last["retained_jobs"]  # finished jobs packed
    assert all(row["full_collections"] >= 0 for row in result["samples"])
    # the store was removed afterwards
    assert os.listdir(scratch) == []
    os.rmdir(scratch)
