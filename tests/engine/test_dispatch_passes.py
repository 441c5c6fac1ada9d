"""Dispatch offers a queue again within one call only if it just started a job: the same
starts, in the same order, as offering every queue on every pass until none starts."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from tay.engine import EngineConfig, Execute
from tay.engine import commands as c
from tay.failures import RequestRefused
from tests.engine.conftest import Driver

QUEUES = ("qa", "qb", "qc", "qd")
TASKS = ("t1", "t2", "t3")


class EveryPassDriver(Driver):
    """The engine with the dispatch loop as it was: every pass offers every queue."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        engine = self.engine

        def dispatch(now_ms, mono_ms, out):
            if not engine.dispatching:
                return
            ready, executing, paused = engine._ready, engine._executing, engine.paused
            progress = True
            while progress:
                progress = False
                for queue in ready.queues():
                    if executing[queue] >= engine.config.queue_credits(queue) \
                            or queue in paused:
                        continue
                    best = ready.take(queue, engine.executors.select)
                    if best is None:
                        continue
                    task, head, executor = best
                    try:
                        engine._start(engine.jobs[head[2]], executor, now_ms, mono_ms, out)
                    except RequestRefused as refusal:
                        ready.push(queue, task, head)
                        engine.activity.start_refusals[
                            refusal.details.get("reason", refusal.code)] += 1
                        return
                    ready.served(queue)
                    progress = True

        engine._dispatch = dispatch


enqueue = st.tuples(st.just("enqueue"), st.sampled_from(QUEUES), st.sampled_from(TASKS))
steps = st.lists(st.one_of(
    enqueue, enqueue, enqueue,
    st.tuples(st.just("worker"), st.lists(st.sampled_from(TASKS), min_size=1, max_size=3,
                                          unique=True), st.integers(1, 8),
              st.none() | st.sampled_from(QUEUES)),
    st.tuples(st.just("succeed"), st.integers(0, 50)),
    st.tuples(st.just("pause"), st.sampled_from(QUEUES), st.booleans()),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=len(QUEUES), max_size=len(QUEUES)), steps)
# a second pass with room for one start: the queue served first in the first pass gets it
@example([2, 2, 2, 2], [("enqueue", "qa", "t1")] * 2 + [("enqueue", "qc", "t1")] * 2
         + [("worker", ["t1"], 3, None)])
def test_dispatch_starts_what_every_pass_started(credits, script) -> None:
    config = EngineConfig(queues=dict(zip(QUEUES, credits)))
    drivers = (Driver(config), EveryPassDriver(config))
    for driver in drivers:
        running: list[Execute] = []
        effects = []
        workers = 0
        for step in script:
            if step[0] == "enqueue":
                out = driver.enqueue(task=step[2], queue=step[1])
            elif step[0] == "worker":
                workers += 1
                out = driver.worker(conn=f"w{workers}", tasks=tuple(step[1]),
                                    capacity=step[2], queue=step[3])
            elif step[0] == "succeed":
                if not running:
                    continue
                out = driver.succeed(running.pop(step[1] % len(running)))
            else:
                op = "pause_queue" if step[2] else "resume_queue"
                out = driver.run(c.Admin("p", driver.rid(), op, {"queue": step[1]}))
            running += [e for e in out.effects if type(e) is Execute]
            effects.append(out.effects)
        driver.effects = effects
    assert drivers[0].effects == drivers[1].effects
