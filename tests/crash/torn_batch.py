"""A store written through the real engine and journal writer, its last batches cut at
every byte: the shared part of tests/crash/test_torn_success.py and test_torn_failure.py.

Each cut is a copy of the store with its tail segment truncated there; a torn record goes
through the operator's ``tay storage repair`` (never automatic), a clean cut needs none.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

from tay.engine import Engine, EngineConfig, Execute
from tay.engine import commands as c
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.compaction.offline import compact_offline
from tay.storage.journal.history_budget import HistoryBudget
from tay.storage.journal.native_commit import make_committer
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tay.storage.recovery.repair import repair_store
from tay.storage.v2 import Retention
from tests.storage.conftest import scratch_path

T0 = 1_700_000_000_000


def config() -> EngineConfig:
    return EngineConfig(max_state_bytes=2**40)


def job_key(execute: Execute) -> bytes:
    return bytes.fromhex(execute.job_id) if isinstance(execute.job_id, str) else execute.job_id


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


def build(root: Path, writer: str, retries: tuple[int, int],
          report: Callable[[int, Execute], object]) -> tuple[int, int, list[Execute], list[int]]:
    """A Store-v2 store with two executing jobs (``retries`` each), then the two reports
    ``report(n, execute)`` builds, one batch of two records each. Returns the tail's size
    before the reports, its size after, the two executions and the record boundaries in
    between."""
    init_store(str(root), durability="write")
    compact_offline(str(root), consumer=Engine(config()), durability="write")  # adoption
    store = Opened(root, writer, 5)
    try:
        store.commit(store.engine.finish_recovery(T0, 0))
        store.run(c.Connect("w", "worker", "rt", 2), T0)
        store.run(c.RegisterTasks("w", ("t",), "r"), T0)
        for n, count in enumerate(retries, 1):
            store.run(c.Enqueue("p", f"e{n}", "t", {"n": n}, {"retries": count}), T0)
        executes = list(store.executes)
        tail = tail_segment(root)
        before = tail.stat().st_size
        boundaries = [before]
        for n, execute in enumerate(executes):
            out = store.engine.handle(report(n, execute), T0 + 5, 5)
            assert len(out.events) == 2  # the result or details, then the finish
            offset = boundaries[-1]
            for record in ev.journal_records(out.events):
                offset += 28 + len(record[3])  # Record v1: 28 bytes and the payload
                boundaries.append(offset)
            store.commit(out)
        after = tail.stat().st_size
        assert boundaries[-1] == after
    finally:
        store.close()
    return before, after, executes, boundaries


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


def run_interrupted_again(root: Path, writer: str,
                          report: Callable[[int, Execute], tuple[object, object]],
                          ) -> tuple[Engine, dict[bytes, object]]:
    """Open the cut store for writing, settle, give every job it runs (an interrupted
    job's rerun, or a retryable one's next attempt) the report ``report(n, execute)``
    builds (the command and what it reports), and reopen read-only. Returns the reopened
    engine and what was reported per job."""
    store = Opened(root, writer, 9)
    again = {}
    try:
        store.commit(store.engine.finish_recovery(T0 + 10, 10))
        later = T0 + 3_600_000  # past any interrupted job's retry due time
        store.run(c.Connect("w", "worker", "rt", 2), later)
        store.run(c.RegisterTasks("w", ("t",), "r"), later)
        store.commit(store.engine.tick(later, later - T0))
        for n, execute in enumerate(store.executes):
            command, again[job_key(execute)] = report(n, execute)
            store.run(command, later)
    finally:
        store.close()
    engine = Engine(config())
    recover(str(root), consumer=engine, activate=False)
    return engine, again


def cut_at_every_byte(base: Path, name: str, before: int, after: int, boundaries: list[int],
                      check: Callable[[Engine, int], dict[bytes, str]],
                      run_again: Callable[[Path], None]) -> list[dict[bytes, str]]:
    """Cut a copy of ``base`` at every offset of its tail from ``before`` to ``after``,
    recover it and ``check`` the engine (which returns each job's outcome). At a clean cut
    (a record boundary) an offline compaction of the store as the crash left it must give
    the same outcomes, and ``run_again`` then runs the interrupted jobs on the cut copy.
    Returns the outcomes of every cut; ``base`` is left as it was."""
    work = scratch_path(name + "-cut")
    tail = tail_segment(base).relative_to(base)
    whole = (base / tail).read_bytes()
    outcomes = []
    try:
        for cut in range(before, after + 1):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            with open(work / tail, "r+b") as file:
                file.truncate(cut)
            seen = check(recovered_engine(work), cut)
            outcomes.append(seen)
            if cut in boundaries:
                compacted = scratch_path(name + "-compacted")
                try:
                    shutil.copytree(work, compacted)
                    compact_offline(str(compacted), consumer=Engine(config()),
                                    retention=Retention("infinity"), durability="write")
                    assert check(recovered_engine(compacted), cut) == seen
                finally:
                    shutil.rmtree(compacted, ignore_errors=True)
                run_again(work)
        assert whole == (base / tail).read_bytes()  # the cuts were made on copies
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return outcomes
