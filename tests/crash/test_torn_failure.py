"""A worker failure cut at every byte of its batch: finished WITH its details, or run again.

A worker failure is two records in one batch: its finish (8,1) and its details (22,2),
carried in a (30,2). A kill -9 in the middle of the batch's multi-page ``pwrite`` keeps a
prefix of the batch (the kernel stops a write to a regular file between pages on a fatal
signal): the cut may tear a record (``tay storage repair`` then removes the torn record,
docs/journal.md "Repair") or fall exactly between two records (nothing to repair). Either
way the failure was never acknowledged (strict sync acknowledges after the whole batch's
fsync), so after the restart every job must be either finished by that failure (retryable
at its next attempt, or discarded after its last) WITH the failure's details, or back to be
run again (its execution interrupted, retryable at the same attempt): never finished by
the failure with ``failure: null``, which would lose the error the worker reported.

The store is written by the real engine (one job with attempts left: retryable; one on its
last attempt: discarded) through each real journal writer (the C writer thread and the
Python twin); each cut is a copy of that store with its tail segment truncated there
(tests/crash/torn_batch.py). At each clean cut an offline compaction of the store as the
crash left it must give the same outcome, and each interrupted job runs again and fails
again with new details.
"""

from __future__ import annotations

import shutil

import pytest

from tay.engine import Engine
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.journal.native_commit import native_writer_available
from tests.crash.torn_batch import build, cut_at_every_byte, job_key, run_interrupted_again
from tests.storage.conftest import scratch_path

# details long enough to cross many cut offsets
ERRORS = ({"type": "ValueError", "message": "no " * 60, "traceback": "line\n" * 20},
          {"type": "KeyError", "message": "gone"})


def check_contract(engine: Engine, failures: dict[bytes, tuple], cut: int) -> dict[bytes, str]:
    """Every job finished by its failure with the failure's details, or interrupted and
    back to be run again (its details, if the cut kept them, are that failure's)."""
    seen = {}
    for job_id, (error, state) in failures.items():
        job = engine.job(job_id)
        where = (cut, job_id.hex(), job.state, job.diagnostic, job.failure)
        assert job.state in ("retryable", "discarded"), where
        if job.diagnostic["code"] == ev.DIAG_INTERRUPTED:
            assert job.state == "retryable", where
            assert job.attempt == 1 and job.next_attempt == 1, where
            assert job.failure in (None, error), where
            seen[job_id] = "interrupted"
        else:
            assert job.diagnostic["code"] == ev.DIAG_ERROR_RETURN, where
            assert job.state == state and job.failure == error, where
            assert job.next_attempt == (2 if state == "retryable" else None), where
            seen[job_id] = state
    return seen


def run_again(root, writer: str, failures: dict[bytes, tuple]) -> None:
    """Run every interrupted job once more (and a retryable one its next attempt) to a
    failure with new details: every job finished by a failure with the details of its last
    run."""
    engine, again = run_interrupted_again(root, writer, lambda n, execute: (
        c.Failed("w", None, execute.reservation_id, execute.execution_id,
                 {"type": "Again", "message": str(n)}), {"type": "Again", "message": str(n)}))
    for job_id, (error, state) in failures.items():
        job = engine.job(job_id)
        where = (job_id.hex(), job.state, job.diagnostic, job.failure)
        assert job.state == state and job.diagnostic["code"] == ev.DIAG_ERROR_RETURN, where
        assert job.failure == again.get(job_id, error), where


@pytest.mark.parametrize("writer", ["c", "python"])
def test_a_failure_cut_at_every_byte_keeps_its_details_or_runs_again(writer):
    if writer == "c" and not native_writer_available():
        pytest.fail("the C writer is not built")
    base = scratch_path("torn-failure")
    try:
        # one job with attempts left (retryable after its failure), one on its last (discarded)
        before, after, executes, boundaries = build(
            base, writer, (3, 0), lambda n, execute: c.Failed(
                "w", None, execute.reservation_id, execute.execution_id, ERRORS[n]))
        left = ("retryable", "discarded")  # what each failure leaves
        failures = {job_key(execute): (ERRORS[n], left[n]) for n, execute in enumerate(executes)}
        outcomes = cut_at_every_byte(
            base, "torn-failure", before, after, boundaries,
            lambda engine, cut: check_contract(engine, failures, cut),
            lambda work: run_again(work, writer, failures))
        # the cuts reach every outcome: both interrupted, one failed, both failed
        states = {tuple(seen.values()) for seen in outcomes}
        assert {("interrupted", "interrupted"), ("retryable", "interrupted"),
                ("retryable", "discarded")} <= states, states
    finally:
        shutil.rmtree(base, ignore_errors=True)
