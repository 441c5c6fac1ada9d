"""Engine-only micro benchmarks (no I/O): enqueue, dispatch+complete, and replay.

Run: .venv/bin/python -m pytest benchmarks/micro/test_engine_bench.py --benchmark-only
Args follow the reference profile: {"account_key": "benchmark-account", "payload": "x"*1024,
"version": 1}. Each round's job count is reported with ``extra_info`` so ops/s = jobs / mean.
"""

from __future__ import annotations

import random

from tay.engine import Engine, EngineConfig
from tay.engine import commands as c
from tay.engine.effects import Execute
from tay.storage.events import encode_event

ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
NOW = 1_700_000_000_000
BATCH = 2_000
REPLAY_JOBS = 10_000  # 3 events each (insert, start, finish) = 30,000 events


def fresh_engine(queues=None) -> Engine:
    return Engine(EngineConfig(queues=queues or {"default": 10}), random.Random(1))


def enqueue_batch(engine: Engine, count: int) -> list:
    events = []
    for index in range(count):
        out = engine.handle(c.Enqueue("p", f"r{index}", "bench.task", ARGS, {}), NOW, 0)
        events.extend(out.events)
    return events


def test_enqueue_commands_per_second(benchmark):
    benchmark.extra_info["jobs_per_round"] = BATCH
    benchmark.pedantic(lambda engine: enqueue_batch(engine, BATCH),
                       setup=lambda: ((fresh_engine(),), {}), rounds=5)


def run_to_completion(engine: Engine, count: int) -> int:
    """Dispatch and complete ``count`` ready jobs on one worker; returns jobs completed."""
    out = engine.handle(c.Connect("w", "worker", "w", 10, None, "h"), NOW, 0)
    out = engine.handle(c.RegisterTasks("w", ("bench.task",), "t"), NOW, 0)
    pending = [e for e in out.effects if isinstance(e, Execute)]
    done = 0
    while pending:
        execute = pending.pop()
        out = engine.handle(c.Succeeded("w", "s", execute.reservation_id, execute.execution_id,
                                        {"ok": True}), NOW + 1, 1)
        pending.extend(e for e in out.effects if isinstance(e, Execute))
        done += 1
    assert done == count
    return done


def test_dispatch_and_complete_per_second(benchmark):
    def setup():
        engine = fresh_engine()
        enqueue_batch(engine, BATCH)
        return (engine, BATCH), {}

    benchmark.extra_info["jobs_per_round"] = BATCH
    benchmark.pedantic(run_to_completion, setup=setup, rounds=5)


def reference_history() -> list[tuple[int, int, int, bytes]]:
    """30,000 encoded events: 10,000 reference jobs inserted, started and completed."""
    engine = Engine(EngineConfig(queues={"a": 2, "b": 2}), random.Random(2))
    events = []
    for index in range(REPLAY_JOBS):
        options = {"queue": "a" if index % 2 else "b"}
        events.extend(engine.handle(c.Enqueue("p", "r", "bench.task", ARGS, options), NOW, 0).events)
    engine.handle(c.Connect("w", "worker", "w", 4, None, "h"), NOW, 0)
    out = engine.handle(c.RegisterTasks("w", ("bench.task",), "t"), NOW, 0)
    events.extend(out.events)
    pending = [e for e in out.effects if isinstance(e, Execute)]
    while pending:
        execute = pending.pop()
        out = engine.handle(c.Succeeded("w", "s", execute.reservation_id, execute.execution_id,
                                        None), NOW + 1, 1)
        events.extend((seq, ev) for seq, ev in out.events if ev.name != "result_recorded")
        pending.extend(e for e in out.effects if isinstance(e, Execute))
    assert len(events) == 3 * REPLAY_JOBS
    return [(seq, ev.type, ev.schema, encode_event(ev)) for seq, ev in events]


def test_replay_30000_events(benchmark):
    history = reference_history()

    def replay_all():
        engine = fresh_engine()
        for sequence, event_type, schema, payload in history:
            engine.replay(sequence, event_type, schema, payload)
        return engine

    benchmark.extra_info["events"] = len(history)
    engine = benchmark.pedantic(replay_all, rounds=3)
    assert engine.state_counts() == {"completed": REPLAY_JOBS}
