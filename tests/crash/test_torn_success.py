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
cut is a copy of that store with its tail segment truncated there. At each clean cut an
offline compaction of the store as the crash left it must give the same outcome.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tay.engine import Engine, EngineConfig, Execute
from tay.engine import commands as c
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.compaction.offline import compact_offline
from tay.storage.journal.history_budget import HistoryBudget
from tay.storage.journal.native_commit import make_committer, native_writer_available
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tay.storage.recovery.repair import repair_store
from tay.storage.v2 import Retention
from tests.storage.conftest import scratch_path

T0 = 1_700_000_000_000
RESULT = {"sum": 3, "text": "done " * 60}  # a result long enough to cross many cut offsets


def config() -> EngineConfig:
    return EngineConfig(max_state_bytes=2**40)


class Opened:
    """A store opened for writing as ``tay serve`` opens it, with one journal writer."""

    def __init__(self, root: Path, writer: str, seed: int) -> None:
        self.engine = Engine(config(), random.Random(seed))
        recovered = recover(str(root), consumer=self.engine, durability="write")
        self.journal = recovered.journal
        self.engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
        self.engine.attach_history(HistoryBudget.for_journal(self.journal,
                                                             config().history_caps))
        self.committer = make_committer(self.journal, writer=writer)
        self.executes: list[Execute] = []

    def commit(self, out) -> None:
        """One batch: every record ``out`` asks for, durable before anything goes on."""
        if out.events:
            self.committer.submit(ev.journal_records(out.events)).result(timeout=30)
        self.executes += [e for e in out.effects if isinstance(e, Execute)]

    def run(self, command, now: int) -> None:
        self.commit(self.engine.handle(command, now, now - T0))

    def close(self) -> None:
        self.committer.close()
        self.journal.close()


def tail_segment(root: Path) -> Path:
    (epoch,) = (root / "epochs").iterdir()
    return sorted((epoch / "segments").iterdir())[-1]


def build(root: Path, writer: str) -> tuple[int, int, dict[bytes, object], list[int]]:
    """A Store-v2 store with two executing jobs, then their successes as two batches (a nil
    result: the fused commit; ``RESULT``: the general path). Returns the tail's size before
    the successes, its size after, each job's result and the record boundaries in between."""
    init_store(str(root), durability="write")
    compact_offline(str(root), consumer=Engine(config()), durability="write")  # adoption
    store = Opened(root, writer, 5)
    try:
        store.commit(store.engine.finish_recovery(T0, 0))
        store.run(c.Connect("w", "worker", "rt", 2), T0)
        store.run(c.RegisterTasks("w", ("t",), "r"), T0)
        store.run(c.Enqueue("p", "e1", "t", {"n": 1}, {"retries": 3}), T0)
        store.run(c.Enqueue("p", "e2", "t", {"n": 2}, {"retries": 3}), T0)
        first, second = store.executes
        tail = tail_segment(root)
        before = tail.stat().st_size
        results = {}
        boundaries = [before]
        for execute, result in ((first, None), (second, RESULT)):
            out = store.engine.handle(c.Succeeded("w", None, execute.reservation_id,
                                                  execute.execution_id, result), T0 + 5, 5)
            assert len(out.events) == 2  # a result and a finish
            offset = boundaries[-1]
            for record in ev.journal_records(out.events):
                offset += 28 + len(record[3])  # Record v1: 28 bytes and the payload
                boundaries.append(offset)
            store.commit(out)
            results[bytes.fromhex(execute.job_id) if isinstance(execute.job_id, str)
                    else execute.job_id] = result
        after = tail.stat().st_size
        assert boundaries[-1] == after
    finally:
        store.close()
    return before, after, results, boundaries


def recovered_engine(root: Path) -> Engine:
    """Recover ``root`` as ``tay serve`` would (read-only): a torn tail is first repaired by
    the operator's ``tay storage repair`` (never automatically); the executions left
    running are settled as interrupted by ``finish_recovery``."""
    try:
        recover(str(root), activate=False, consumer=Engine(config()))
    except RecoveryRefused as refusal:
        assert refusal.kind == "incomplete_tail", refusal
        assert repair_store(str(root)).repaired
    engine = Engine(config(), random.Random(7))
    recovered = recover(str(root), consumer=engine, activate=False)
    engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
    engine.finish_recovery(T0 + 10, 10)
    return engine


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
    """Open the cut store for writing, settle, run every interrupted job once more to a
    success, and reopen: all completed, each with the result of its second run."""
    store = Opened(root, writer, 9)
    again = {}
    try:
        store.commit(store.engine.finish_recovery(T0 + 10, 10))
        later = T0 + 3_600_000  # past any interrupted job's retry due time
        store.run(c.Connect("w", "worker", "rt", 2), later)
        store.run(c.RegisterTasks("w", ("t",), "r"), later)
        store.commit(store.engine.tick(later, later - T0))
        for n, execute in enumerate(store.executes):
            job_id = bytes.fromhex(execute.job_id) if isinstance(execute.job_id, str) \
                else execute.job_id
            again[job_id] = {"again": n}
            store.run(c.Succeeded("w", None, execute.reservation_id, execute.execution_id,
                                  again[job_id]), later)
    finally:
        store.close()
    engine = Engine(config())
    recover(str(root), consumer=engine, activate=False)
    for job_id, result in results.items():
        job = engine.job(job_id)
        assert job.state == "completed" and job.result_present, (job_id.hex(), job.state)
        assert job.result == again.get(job_id, result), (job_id.hex(), job.result)


@pytest.mark.parametrize("writer", ["c", "python"])
def test_a_success_cut_at_every_byte_completes_with_its_result_or_runs_again(writer):
    if writer == "c" and not native_writer_available():
        pytest.fail("the C writer is not built")
    base = scratch_path("torn-success")
    work = scratch_path("torn-success-cut")
    try:
        before, after, results, boundaries = build(base, writer)
        tail = tail_segment(base).relative_to(base)
        whole = (base / tail).read_bytes()
        states = set()
        for cut in range(before, after + 1):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            with open(work / tail, "r+b") as file:
                file.truncate(cut)
            seen = check_contract(recovered_engine(work), results, cut)
            states.add(tuple(sorted(seen.values())))
            if cut in boundaries:  # a clean cut: the interrupted jobs can finish again
                compacted = scratch_path("torn-success-compacted")
                try:  # and an offline compaction of the store as the crash left it keeps
                    shutil.copytree(work, compacted)  # the same contract
                    compact_offline(str(compacted), consumer=Engine(config()),
                                    retention=Retention("infinity"), durability="write")
                    assert check_contract(recovered_engine(compacted), results, cut) == seen
                finally:
                    shutil.rmtree(compacted, ignore_errors=True)
                run_again(work, writer, results)
        # the cuts reach every outcome: both interrupted, one done, both done
        assert {("retryable", "retryable"), ("completed", "completed")} <= states, states
        assert whole == (base / tail).read_bytes()  # the cuts were made on copies
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
