"""Recovering a store into an engine, exactly as ``tay serve`` does, for ``serve`` and for
``tay storage inspect``: one path, so ``inspect`` refuses what ``serve`` refuses.

The engine is the replay consumer: every event goes through its one ``apply`` (jobs,
schedules, operations), so a (9,2) cancellation of a schedule that was never registered is
refused here, not counted. ``finish_recovery`` then checks the state budget
(``--max-state-bytes``) and settles executions left running. ``serve`` activates the
journal and commits what ``finish_recovery`` emits; ``inspect`` recovers read-only
(nothing is created, written or fsynced) and discards it.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from tay._frozen import LazyModule, Record
from tay.engine.config import EngineConfig
from tay.storage import events as ev
from tay.storage.events.transitions import STATES
from tay.storage.journal.history_budget import HistoryBudget
from tay.storage.recovery.recover import Recovered, recover

if TYPE_CHECKING:  # the effects (and orjson with them) load with the engine: tay serve
    from tay.engine.effects import Outcome  # imports them beside recovery's physical pass
    from tay.storage.recovery import inspect as recovery_inspect
else:  # only ``tay storage inspect`` summarizes: not loaded by a serve start
    recovery_inspect = LazyModule("tay.storage.recovery.inspect")


class _CountingConsumer(Record):
    """The engine as replay consumer, counting the events that are not job events.

    Everything else (the Store-v2 reducer's ``epoch_*`` side, once the engine has it) is the
    engine's own: a consumer the engine could not be is refused here as it is by ``serve``.

    The engine is made on first use, which recovery's physical pass (lock, listing, SHA-256
    and scan of every segment) never makes: ``run_serve`` imports the engine on its main
    thread meanwhile. Making it has no effect a refusal could observe.
    """

    __slots__ = ("config", "made", "other_events")
    config: EngineConfig
    made: Any  # the engine, once made
    other_events: Counter

    def __init__(self, config: EngineConfig, other_events: Counter | None = None) -> None:
        self.config = config
        self.made = None
        self.other_events = Counter() if other_events is None else other_events

    @property
    def engine(self) -> Any:
        engine = self.made
        if engine is None:
            from tay.engine import Engine  # the engine package exposes its facade lazily

            engine = self.made = Engine(self.config)
            engine.defer_job_index()  # the admin index is built on first use, not per event
        return engine

    @property
    def limits(self) -> Any:
        return self.engine.limits

    def consume_event(self, sequence: int, event: ev.Event) -> Any:
        if not event.is_job_event:
            self.other_events[event.name] += 1
        return self.engine.consume_event(sequence, event)

    def epoch_entity(self, revision: int, event: ev.Event) -> Any:
        self.other_events[event.name] += 1
        return self.engine.epoch_entity(revision, event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class RecoveredEngine(Record):
    """A store replayed into a fresh engine and checked as ``serve`` checks it."""

    __slots__ = ("engine", "recovered", "settle", "job_states", "other_events")
    engine: Any
    recovered: Recovered
    settle: Outcome  # what finish_recovery emits (serve commits it; inspect does not)
    job_states: dict[str, int]  # as on disk, before executions left running are settled
    other_events: Counter  # replayed events that are not job events, by name

    def __init__(self, engine: Any, recovered: Recovered, settle: Outcome,
                 job_states: dict[str, int], other_events: Counter) -> None:
        self.engine = engine
        self.recovered = recovered
        self.settle = settle
        self.job_states = job_states
        self.other_events = other_events


def recover_engine(data_dir: str, engine_config: EngineConfig, *, activate: bool,
                   durability: str = "sync", validated_filesystem: bool = False,
                   io: Any = None) -> RecoveredEngine:
    """Recover ``data_dir`` into ``Engine(engine_config)`` and run ``finish_recovery``.

    With ``activate`` the journal is open for writing (``recovered.journal``) and the
    engine's history caps are attached at its tail; the caller owns the journal and must
    close it. Raises ``RecoveryRefused`` (storage untouched) on any refusal.
    """
    consumer = _CountingConsumer(engine_config)
    # Replay builds the retained state and next to no cyclic garbage: the cycle collector's
    # full passes over the growing heap cost ~10% of a long replay, so it waits until after
    collecting = gc.isenabled()
    gc.disable()
    try:
        recovered = recover(data_dir, consumer=consumer, durability=durability,
                            validated_filesystem=validated_filesystem, activate=activate, io=io)
    finally:
        if collecting:
            gc.enable()
    engine = consumer.engine
    try:
        if recovered.store_version == 2:  # from now on the engine writes into the epoch
            engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
        if recovered.journal is not None:
            engine.attach_history(HistoryBudget.for_journal(recovered.journal,
                                                            engine_config.history_caps))
        job_states = {state: engine.counts[state] for state in STATES}
        settle = engine.finish_recovery(time.time_ns() // 1_000_000,
                                        time.monotonic_ns() // 1_000_000)
    except BaseException:
        if recovered.journal is not None:
            recovered.journal.close()
        raise
    return RecoveredEngine(engine, recovered, settle, job_states, consumer.other_events)


def inspect_store(data_dir: str, engine_config: EngineConfig, *, io: Any = None) -> dict[str, Any]:
    """``tay storage inspect``: recover read-only exactly as ``serve`` does, and summarize.

    Job counts are as on disk (before executions left running would be settled); the state
    budget line says how much of ``--max-state-bytes`` the retained jobs take.
    """
    done = recover_engine(data_dir, engine_config, activate=False, io=io)
    engine = done.engine
    summary = recovery_inspect.summarize(done.recovered, jobs=engine.job_count(),
                                         job_states=done.job_states,
                                         other_events=dict(done.other_events))
    summary["state_bytes"] = {"used": engine.budget.used, "limit": engine.budget.limit}
    summary["interrupted_executions"] = done.job_states["executing"]
    return summary
