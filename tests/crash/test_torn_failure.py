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
Python twin); each cut is a copy of that store with its tail segment truncated there. At
each clean cut an offline compaction of the store as the crash left it must give the same
outcome, and each interrupted job runs again and fails again with new details.
"""

from __future__ import annotations

import shutil

import pytest

from tay.engine import Engine
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.compaction.offline import compact_offline
from tay.storage.journal.native_commit import native_writer_available
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tay.storage.v2 import Retention
from tests.crash.test_torn_success import T0, Opened, config, recovered_engine, tail_segment
from tests.storage.conftest import scratch_path

# details long enough to cross many cut offsets
ERRORS = ({"type": "ValueError", "message": "no " * 60, "traceback": "line\n" * 20},
          {"type": "KeyError", "message": "gone"})


def job_key(execute) -> bytes:
    return bytes.fromhex(execute.job_id) if isinstance(execute.job_id, str) else execute.job_id


def build(root, writer: str) -> tuple[int, int, dict[bytes, tuple], list[int]]:
    """A Store-v2 store with two executing jobs (one with attempts left, one on its last),
    then their failures as two batches. Returns the tail's size before the failures, its size
    after, each job's (error, state the failure leaves) and the record boundaries between."""
    init_store(str(root), durability="write")
    compact_offline(str(root), consumer=Engine(config()), durability="write")  # adoption
    store = Opened(root, writer, 5)
    try:
        store.commit(store.engine.finish_recovery(T0, 0))
        store.run(c.Connect("w", "worker", "rt", 2), T0)
        store.run(c.RegisterTasks("w", ("t",), "r"), T0)
        store.run(c.Enqueue("p", "e1", "t", {"n": 1}, {"retries": 3}), T0)
        store.run(c.Enqueue("p", "e2", "t", {"n": 2}, {"retries": 0}), T0)
        tail = tail_segment(root)
        before = tail.stat().st_size
        failures = {}
        boundaries = [before]
        for execute, error, state in zip(store.executes, ERRORS, ("retryable", "discarded")):
            out = store.engine.handle(c.Failed("w", None, execute.reservation_id,
                                               execute.execution_id, error), T0 + 5, 5)
            assert len(out.events) == 2  # a finish and the failure's details
            offset = boundaries[-1]
            for record in ev.journal_records(out.events):
                offset += 28 + len(record[3])  # Record v1: 28 bytes and the payload
                boundaries.append(offset)
            store.commit(out)
            failures[job_key(execute)] = (error, state)
        after = tail.stat().st_size
        assert boundaries[-1] == after
    finally:
        store.close()
    return before, after, failures, boundaries


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
    """Open the cut store for writing, settle, run every interrupted job once more (and a
    retryable one its next attempt) to a failure with new details, and reopen: every job
    finished by a failure with the details of its last run."""
    store = Opened(root, writer, 9)
    again = {}
    try:
        store.commit(store.engine.finish_recovery(T0 + 10, 10))
        later = T0 + 3_600_000  # past any interrupted job's retry due time
        store.run(c.Connect("w", "worker", "rt", 2), later)
        store.run(c.RegisterTasks("w", ("t",), "r"), later)
        store.commit(store.engine.tick(later, later - T0))
        for n, execute in enumerate(store.executes):
            job_id = job_key(execute)  # an interrupted job's rerun, or a retryable
            again[job_id] = {"type": "Again", "message": str(n)}
            store.run(c.Failed("w", None, execute.reservation_id, execute.execution_id,
                               again[job_id]), later)
    finally:
        store.close()
    engine = Engine(config())
    recover(str(root), consumer=engine, activate=False)
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
    work = scratch_path("torn-failure-cut")
    try:
        before, after, failures, boundaries = build(base, writer)
        tail = tail_segment(base).relative_to(base)
        whole = (base / tail).read_bytes()
        states = set()
        for cut in range(before, after + 1):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            with open(work / tail, "r+b") as file:
                file.truncate(cut)
            seen = check_contract(recovered_engine(work), failures, cut)
            states.add(tuple(seen.values()))
            if cut in boundaries:  # a clean cut: the interrupted jobs can fail again
                compacted = scratch_path("torn-failure-compacted")
                try:  # and an offline compaction of the store as the crash left it keeps
                    shutil.copytree(work, compacted)  # the same contract
                    compact_offline(str(compacted), consumer=Engine(config()),
                                    retention=Retention("infinity"), durability="write")
                    assert check_contract(recovered_engine(compacted), failures, cut) == seen
                finally:
                    shutil.rmtree(compacted, ignore_errors=True)
                run_again(work, writer, failures)
        # the cuts reach every outcome: both interrupted, one failed, both failed
        assert {("interrupted", "interrupted"), ("retryable", "interrupted"),
                ("retryable", "discarded")} <= states, states
        assert whole == (base / tail).read_bytes()  # the cuts were made on copies
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
