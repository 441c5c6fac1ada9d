"""A success cut at every byte of its batch: completed WITH its result, or run again.

A success is two records in one batch: its result (30,2)/(10,2) and its finish (8,1). A
kill -9 in the middle of the batch's multi-page ``pwrite`` keeps a prefix of the batch (the
kernel stops a write to a regular file between pages on a fatal signal): the cut may tear a
record (``tay storage repair`` then removes the torn record, docs/journal.md "Repair") or
fall exactly between two records (nothing to repair). Either way the success was never
acknowledged (strict sync acknowledges after the whole batch's fsync), so after the restart
every job must be either completed with its result, or back to be run again (its
execution interrupted, retryable at the same attempt, no result): never completed without
a result (``result_missing``, which only older histories may show), which would also never
run again (tests/crash/test_kill9.py saw it once, phase "completions", seed 21).

The store is written by the real engine (fused nil-result success and the general path with
a result) through each real journal writer (the C writer thread and the Python twin); each
cut is a copy of that store with its tail segment truncated there (tests/crash/torn_batch.py).
At each clean cut an offline compaction of the store as the crash left it must give the same
outcome, and each interrupted job runs again to a success.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tay.engine import Engine
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.journal.native_commit import native_writer_available
from tests.crash.torn_batch import build, cut_at_every_byte, job_key, run_interrupted_again
from tests.storage.conftest import scratch_path

RESULT = {"sum": 3, "text": "done " * 60}  # a result long enough to cross many cut offsets
REPORTED = (None, RESULT)  # a nil result: the fused commit; RESULT: the general path


def check_contract(engine: Engine, results: dict[bytes, object], cut: int) -> dict[bytes, str]:
    """Every job completed with its result, or interrupted and back to be run again."""
    seen = {}
    for job_id, result in results.items():
        job = engine.job(job_id)
        where = (cut, job_id.hex(), job.state, job.result_present, job.diagnostic)
        if job.state == "completed":
            assert job.result_present and job.result == result, where
        else:
            assert job.state == "retryable" and not job.result_present, where
            assert job.diagnostic["code"] == ev.DIAG_INTERRUPTED, where
            assert job.attempt == 1 and job.next_attempt == 1, where
        seen[job_id] = job.state
    return seen


def run_again(root: Path, writer: str, results: dict[bytes, object]) -> None:
    """Run every interrupted job once more to a success: all completed, each with the
    result of its last run."""
    engine, again = run_interrupted_again(root, writer, lambda n, execute: (
        c.Succeeded("w", None, execute.reservation_id, execute.execution_id,
                    {"again": n}), {"again": n}))
    for job_id, result in results.items():
        job = engine.job(job_id)
        assert job.state == "completed" and job.result_present, (job_id.hex(), job.state)
        assert job.result == again.get(job_id, result), (job_id.hex(), job.result)


@pytest.mark.parametrize("writer", ["c", "python"])
def test_a_success_cut_at_every_byte_completes_with_its_result_or_runs_again(writer):
    if writer == "c" and not native_writer_available():
        pytest.fail("the C writer is not built")
    base = scratch_path("torn-success")
    try:
        before, after, executes, boundaries = build(
            base, writer, (3, 3), lambda n, execute: c.Succeeded(
                "w", None, execute.reservation_id, execute.execution_id, REPORTED[n]))
        results = {job_key(execute): REPORTED[n] for n, execute in enumerate(executes)}
        outcomes = cut_at_every_byte(
            base, "torn-success", before, after, boundaries,
            lambda engine, cut: check_contract(engine, results, cut),
            lambda work: run_again(work, writer, results))
        # the cuts reach every outcome: both interrupted, one done, both done
        states = {tuple(sorted(seen.values())) for seen in outcomes}
        assert {("retryable", "retryable"), ("completed", "completed")} <= states, states
    finally:
        shutil.rmtree(base, ignore_errors=True)
