"""The per-job path's shortcuts give what the paths they skip would give.

- ``parse_enqueue`` with no id, delay, run_at or timeout option skips the calls that read
  those options: the request (and any refusal) is the one the full path gives, which an
  explicit ``timeout_ms`` equal to the default forces.
- ``LazyDefinition.scalars`` read at the named positions are the mapping's own values.
- ``public_job`` of a lazy definition equals ``public_job`` of the same definition as a dict.
- Dispatch with the server's random source draws two distinct tokens per execution.
- ``ReadyIndex.take`` picks and pops what ``heads`` then ``pop`` did; ``next_wakeup`` is
  the earliest live execution deadline with stale timeout heads dropped in place.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.core import Engine
from tay.engine.effects import Execute
from tay.engine.executors import Reservation
from tay.engine.retained.jobs import JobEntry, public_job
from tay.engine.validation.options import parse_enqueue
from tay.engine.ready import ReadyIndex
from tay.failures import RequestRefused
from tay.storage.events.definition import (
    MAX_ATTEMPTS, QUEUE_KEY, SCHEDULED_AT, TIMEOUT_MS, WORKER_KEY, LazyDefinition,
)
from tests.engine.conftest import M0, T0

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CONFIG = EngineConfig()
options = st.fixed_dictionaries({}, optional={
    "queue": st.sampled_from(["q1", "default", "", 5, None]),
    "retries": st.sampled_from([0, 2, -1, True, None]),
    "backoff": st.sampled_from(["exponential", "linear", None]),
    "durability": st.sampled_from(["persistent", "volatile", "disk", None]),
    "delay": st.sampled_from([1, 0.5, -1, None]),
    "delay_ms": st.sampled_from([0, 5_000, 1.5, None]),
    "run_at": st.sampled_from([T0 + 9, -1, None]),
    "id": st.sampled_from(["1" * 32, "0" * 32, None]),
    "submission_id": st.sampled_from(["order-1", "", None]),
})
args = st.sampled_from([{}, {"b": 1, "a": [1, "x"]}, {"k": None}, [1], {"x": "y" * 300}])


def parsed(task, args, options, decoded):
    """The request's fields (the definition as its bytes), or the refusal's wire error."""
    try:
        request = parse_enqueue(task, args, options, T0, CONFIG, random.Random(5), decoded)
    except RequestRefused as refusal:
        return ("refused", refusal.wire_error())
    return (request.job_id, request.definition.canonical, request.definition_size,
            request.definition_nodes, request.durability, request.args_json)


@SETTINGS
@given(task=st.sampled_from(["t", "", 7]), args=args, options=options,
       decoded=st.booleans())
def test_an_enqueue_without_timing_or_id_options_parses_as_the_full_path_does(
        task, args, options, decoded):
    if options.get("timeout") is not None or options.get("timeout_ms") is not None:
        return
    # an explicit default timeout_ms is a no-op that takes the full path
    full = parsed(task, args, {**options, "timeout_ms": CONFIG.default_timeout_ms}, decoded)
    assert parsed(task, args, options, decoded) == full


@SETTINGS
@given(max_attempts=st.integers(1, 65_535), queue=st.sampled_from(["q", "default", "é"]),
       scheduled_at=st.none() | st.integers(0, 2**63 - 1), timeout_ms=st.integers(1, 86_400_000),
       task=st.sampled_from(["t", "tay.benchmark.v1"]))
def test_the_named_scalar_positions_are_the_definitions_fields(max_attempts, queue, scheduled_at,
                                                              timeout_ms, task):
    definition = LazyDefinition.from_args_json(b'{"a":1}', 2, worker_key=task, queue_key=queue,
                                               max_attempts=max_attempts,
                                               scheduled_at=scheduled_at, timeout_ms=timeout_ms)
    scalars = definition.scalars
    assert (scalars[MAX_ATTEMPTS], scalars[QUEUE_KEY], scalars[SCHEDULED_AT],
            scalars[TIMEOUT_MS], scalars[WORKER_KEY]) == (
        definition["max_attempts"], definition["queue_key"], definition["scheduled_at"],
        definition["timeout_ms"], definition["worker_key"])
    entry = JobEntry(_state(definition), False, 1)
    assert (entry.queue, entry.task) == (queue, task)
    as_dict = JobEntry(_state(dict(definition)), False, 1)
    assert (as_dict.queue, as_dict.task) == (queue, task)
    assert public_job(entry) == public_job(as_dict)
    volatile = JobEntry(_state(definition), True, 1)
    assert public_job(volatile)["durability"] == "volatile"
    assert public_job(entry)["durability"] == "persistent"


def _state(definition):
    from tay.storage.events import job_inserted
    from tay.storage.events.transitions import apply

    return apply(None, 1, job_inserted(b"\x01" * 16, T0, definition))


def test_dispatch_with_the_servers_random_source_draws_two_tokens_per_execution():
    engine = Engine(EngineConfig())  # BufferedSystemRandom: tokens come in batches
    now, mono = T0, M0
    engine.handle(c.Connect("w", "worker", "rt", 4, None, "h"), now, mono)
    engine.handle(c.RegisterTasks("w", ("t",), "r"), now, mono)
    tokens = set()
    for index in range(3):
        out = engine.handle(c.Enqueue("p", f"e{index}", "t", {}, {"timeout_ms": 5_000}),
                            now, mono)
        (execute,) = [e for e in out.effects if type(e) is Execute]
        assert execute.timeout_ms == 5_000
        reservation = engine.executors.reservations[execute.reservation_id]
        assert reservation == Reservation(execute.reservation_id, execute.execution_id, "w",
                                          bytes.fromhex(execute.job_id), "default",
                                          mono + 5_000)
        tokens |= {execute.reservation_id, execute.execution_id}
    assert len(tokens) == 6 and all(len(token) == 24 for token in tokens)


@SETTINGS
@given(timeouts=st.lists(st.integers(1, 50), min_size=1, max_size=8),
       order=st.randoms(use_true_random=False))
def test_next_wakeup_is_the_earliest_live_execution_deadline(timeouts, order):
    """Executions settled in any order: the wake-up is always the earliest deadline still
    running (stale heads are dropped in place, as ``DueHeap.peek_due`` drops them)."""
    engine = Engine(EngineConfig(queues={"default": 100}), random.Random(3))
    now, mono = T0, M0
    engine.handle(c.Connect("w", "worker", "rt", 100, None, "h"), now, mono)
    engine.handle(c.RegisterTasks("w", ("t",), "r"), now, mono)
    executes = []
    for index, timeout in enumerate(timeouts):
        out = engine.handle(c.Enqueue("p", f"e{index}", "t", {}, {"timeout_ms": timeout * 100}),
                            now, mono + index)
        executes += [e for e in out.effects if type(e) is Execute]
    order.shuffle(executes)
    while True:
        live = [r.deadline_mono for r in engine.executors.reservations.values()]
        assert engine.next_wakeup() == (min(live) if live else None)
        if not executes:
            break
        execute = executes.pop()
        engine.handle(c.Succeeded("w", "d", execute.reservation_id, execute.execution_id,
                                  None), now, mono)


def _reference_take(ready, queue, select):
    """What ``_dispatch_one`` did before ``take``: heads, the earliest with an executor, pop."""
    best = None
    for task, head in ready.heads(queue):
        if best is not None and head >= best[1]:
            continue
        executor = select(task, queue)
        if executor is not None:
            best = (task, head, executor)
    if best is not None:
        ready.pop(queue, best[0])
    return best


@SETTINGS
@given(pushes=st.lists(st.tuples(st.sampled_from("qr"), st.sampled_from("abc"),
                                 st.integers(0, 5), st.booleans()), max_size=25),
       served=st.frozensets(st.sampled_from("abc")), takes=st.integers(1, 30))
def test_take_picks_and_pops_what_heads_then_pop_did(pushes, served, takes):
    """Random heaps per (queue, task), some entries stale, some tasks without an executor:
    ``take`` and the reference give the same picks and leave the same index."""
    live = set()
    indexes = [ReadyIndex(lambda entry: entry in live) for _ in range(2)]
    for order, (queue, task, due, is_live) in enumerate(pushes):
        entry = (due, order, bytes([order]))
        if is_live:
            live.add(entry)
        for index in indexes:
            index.push(queue, task, entry)
    select = lambda task, queue: f"x-{task}" if task in served else None  # noqa: E731
    for number in range(takes):
        queue = "qr"[number % 2]
        taken = indexes[0].take(queue, select)
        assert taken == _reference_take(indexes[1], queue, select)
        if taken is not None:
            live.discard(taken[1])
        assert indexes[0]._queues == indexes[1]._queues
        assert list(indexes[0].rotation) == list(indexes[1].rotation)
