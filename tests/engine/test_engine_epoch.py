"""The engine inside a Store-v2 epoch: the same random command sequences as the stateful
test, written as (8,1)/(30,2) records. Replaying those records through a fresh engine's
reducer must give the same durable state, and a base built from the live state (snapshots,
attachments, checkpoints) must load back to it (every state the engine reaches has a
credible snapshot)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.storage.compaction.plan import base_records
from tay.storage.compaction.verify import job_fields
from tay.storage.formats import value
from tay.storage.v2.epoch_records import (
    decode_epoch_event, decode_job_attachment, encode_epoch_event,
)
from tay.storage.v2.records import decode_mutation, decode_snapshot, encode_mutation
from tests.engine.conftest import Driver
from tests.storage.json_strategies import json_values
from tests.engine.test_engine_stateful import EngineMachine

CONFIG = dict(queues={"q1": 2, "q2": 3})


def epoch_driver(seed: int = 7) -> Driver:
    driver = Driver(EngineConfig(**CONFIG), seed=seed)
    engine = driver.engine
    reducer = engine.new_epoch_reducer()
    reducer.end_base()  # an empty base: the tail starts at once
    engine.attach_epoch(reducer, 1)
    return driver


def replay_tail(records) -> Driver:
    fresh = epoch_driver()
    reducer = fresh.engine.epoch
    for sequence, event in records:
        assert sequence == fresh.engine.next_sequence
        if event.pair == (8, 1):
            reducer.mutation(decode_mutation(event.raw))
        else:
            assert event.pair == (30, 2)
            reducer.event(decode_epoch_event(event.raw))
        fresh.engine.next_sequence += 1
    return fresh


def load_base(engine) -> Driver:
    fresh = Driver(EngineConfig(**CONFIG))
    reducer = fresh.engine.new_epoch_reducer()
    jobs = sorted(engine.retained_jobs(), key=lambda job: job.id)
    for rtype, schema, payload in base_records(jobs, engine.checkpoints(0)):
        if (rtype, schema) == (7, 1):
            reducer.snapshot(decode_snapshot(payload))
        elif (rtype, schema) == (31, 2):
            reducer.attachment(decode_job_attachment(payload))
        else:
            reducer.checkpoint(decode_epoch_event(payload))
    reducer.end_base()
    fresh.engine.attach_epoch(reducer, 1)
    return fresh


def durable(engine) -> dict:
    return {k: job_fields(e.state) for k, e in engine.jobs.items() if not e.volatile}


class EpochMachine(EngineMachine):
    def make_driver(self, seed: int) -> Driver:
        return epoch_driver(seed)

    def teardown(self):
        if not hasattr(self, "driver"):
            return
        engine = self.driver.engine
        assert all(event.pair in ((8, 1), (30, 2)) for _, event in self.driver.journal)
        # the live path's packed records are the reference encoders' bytes, record for record
        for _, event in self.driver.journal:
            if event.pair == (8, 1):
                assert encode_mutation(decode_mutation(event.raw)) == event.raw
            else:
                carried = decode_epoch_event(event.raw)
                assert encode_epoch_event(carried.event, carried.revision) == event.raw
        fresh = replay_tail(self.driver.journal)
        assert durable(fresh.engine) == durable(engine)
        assert fresh.engine.epoch.next_order == engine.epoch.next_order
        charges = [sum(e.charge for e in d.jobs.values() if not e.volatile)
                   for d in (fresh.engine, engine)]
        assert charges[0] == charges[1]
        assert fresh.engine.day_history.recorded == engine.day_history.recorded
        based = load_base(engine)
        assert durable(based.engine) == durable(engine)
        assert based.engine.day_history.recorded == engine.day_history.recorded
        assert based.engine.epoch.entities == engine.epoch.entities


EpochMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestEngineEpoch = EpochMachine.TestCase


def test_mutation_payload_is_the_upstream_layout():
    """A live insert's (8,1) payload decodes back to the same mutation."""
    driver = epoch_driver()
    out = driver.enqueue(task="t", args={"a": 1})
    ((sequence, record),) = out.events
    mutation = decode_mutation(record.raw)
    assert (sequence, mutation.kind, mutation.expected_revision, mutation.new_revision) == (
        1, 1, 0, 1)
    assert mutation.availability_order == 1
    assert value.decode(record.raw[41:])["definition"]["args"] == {"a": 1}


def test_operations_schedules_and_failures_round_trip_in_an_epoch():
    """Every pair that is not a lifecycle mutation rides in (30,2): failure details, a
    requeue, an expedite, queue pause/resume, scale and rate limit, schedule registration
    and delivery; a base keeps the failure details and the result as attachments and the
    queue and schedule as checkpoints at their revisions, so the tail can continue after
    it."""
    from tay.engine import Execute, commands as c
    from tests.engine.conftest import reply

    driver = epoch_driver()
    driver.worker(tasks=("t", "s"))
    (execute,) = [e for e in driver.enqueue(task="t", retries=0).effects
                  if isinstance(e, Execute)]
    driver.fail(execute, {"type": "KeyError", "message": "'x'"})
    reply(driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": execute.job_id})))
    reply(driver.run(c.Admin("p", driver.rid(), "pause_queue", {"queue": "default"})))
    waiting = driver.job_id(task="t")
    reply(driver.run(c.Admin("p", driver.rid(), "cancel_job", {"job_id": waiting})))
    reply(driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": waiting})))  # (23,2)
    later = driver.job_id(task="t", delay=3600)
    reply(driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": later})))  # (27,2)
    reply(driver.run(c.Admin("p", driver.rid(), "resume_queue", {"queue": "default"})))
    for queue, concurrency in (("default", 3), ("gone", 2), ("gone", None)):
        reply(driver.run(c.Admin("p", driver.rid(), "scale_queue",
                                 {"queue": queue, "concurrency": concurrency})))
    for queue, starts in (("default", 5), ("lifted", 2), ("lifted", None)):
        reply(driver.run(c.Admin("p", driver.rid(), "limit_queue", {
            "queue": queue, "starts": starts, "period_ms": starts and 60_000})))
    reply(driver.run(c.Schedule("p", driver.rid(), {
        "declaration_id": "every-second", "task": "s", "every": {"seconds": 1}})))
    for name, op in (("held", "pause_schedule"), ("was-held", "pause_schedule"),
                     ("was-held", "resume_schedule")):
        if op == "pause_schedule":
            reply(driver.run(c.Schedule("p", driver.rid(), {
                "declaration_id": name, "task": "s", "every": {"seconds": 1}})))
        reply(driver.run(c.Admin("p", driver.rid(), op, {"schedule_id": name})))
    driver.advance(1_500)
    driver.tick()
    engine = driver.engine
    pairs = {event.pair for _, event in driver.journal}
    assert pairs == {(8, 1), (30, 2)}
    carried = {(e.type, e.schema, e.name) for _, e in driver.journal if e.pair == (30, 2)}
    assert {name for *_, name in carried} >= {"failure_recorded", "job_requeued",
                                              "job_expedited",
                                              "queue_paused", "queue_resumed", "queue_scaled",
                                              "queue_rate_limited",
                                              "schedule_state", "schedule_delivered",
                                              "schedule_paused", "schedule_resumed"}
    fresh = replay_tail(driver.journal)
    assert durable(fresh.engine) == durable(engine)
    assert fresh.engine.schedules.states() == engine.schedules.states()
    based = load_base(engine)
    assert durable(based.engine) == durable(engine)
    assert based.engine.schedules.states() == engine.schedules.states()
    assert based.engine.epoch.entities == engine.epoch.entities
    assert based.engine.job(bytes.fromhex(execute.job_id)).failure["type"] == "KeyError"
    for recovered in (fresh.engine, based.engine):  # "gone" checkpointed at its reset
        assert recovered.scaled == {"default": 3}
        assert recovered.credit_limits == {**engine.config.queues, "default": 3}
    assert based.engine.epoch.entities[("queue_scale", "gone")] == 2
    for recovered in (fresh.engine, based.engine):  # "lifted" checkpointed as no limit
        assert recovered.rates.limits == {"default": (5, 60_000)}
    assert based.engine.epoch.entities[("queue_rate", "lifted")] == 2
    for recovered in (fresh.engine, based.engine):  # "was-held" checkpointed at its resume
        assert recovered.schedules.paused == {"held"}
    assert based.engine.epoch.entities[("schedule_pause", "was-held")] == 2


def test_expire_releases_id_definition_result_and_budget():
    from tay.engine import Execute
    from tests.engine.conftest import refusal, reply

    driver = epoch_driver()
    driver.worker()
    before = driver.engine.budget.used
    (execute,) = [e for e in driver.enqueue(submission_id="once", args={"x": 1}).effects
                  if isinstance(e, Execute)]
    driver.succeed(execute, {"big": "r" * 500})
    engine = driver.engine
    job_id = bytes.fromhex(execute.job_id)
    assert engine.budget.used > before and engine.counts["completed"] == 1
    live = driver.job_id(args={"y": 2})  # not terminal: never expired
    assert engine.expire([job_id, bytes.fromhex(live)]) == 1
    assert engine.job(job_id) is None and engine.counts["completed"] == 0
    assert engine.budget.used == before + engine.jobs[bytes.fromhex(live)].charge
    assert engine.budget.admitted == engine.jobs[bytes.fromhex(live)].charge
    assert refusal(driver.run(c.Status("p", "s", execute.job_id)))["code"] == "not_found"
    # the id is free again: the same submission creates a new job
    again = reply(driver.enqueue(submission_id="once", args={"x": 3}))
    assert again.fields["job_id"] == execute.job_id and again.fields["job"]["state"] in (
        "available", "executing")


def test_mutation_payload_writes_the_body_encode_map_writes():
    """The (8,1) body is encoded field by field from the event: the same bytes as the
    generic map encoder gives for the body (payload minus the prefix fields, plus the
    availability order where the kind has one)."""
    from tay.engine.epoch import mutation_payload
    from tay.storage import events as ev
    from tay.storage.events.definition import build_definition

    job = bytes(range(16))
    definition = build_definition(worker_key="t", queue_key="q", args={"a": [1, "x"]},
                                  max_attempts=3, scheduled_at=None, timeout_ms=5_000)
    events = [
        (ev.job_inserted(job, 10, definition), 1, 4),
        (ev.job_available(job, 10, 1, 9), 2, 5),
        (ev.job_started(job, 11, 2, 1, 1), 3, None),
        (ev.job_finished(job, 12, 3, execution_token=3, outcome=ev.WORKER_FAILURE,
                         diagnostic_code=ev.DIAG_RAISE, disposition=ev.RETRYABLE,
                         next_attempt=2, next_due_at=1012), 4, None),
        (ev.job_retried(job, 13, 4, ev.MODE_EXPEDITE), 5, 6),
        (ev.job_cancelled(job, 14, 5, None), 6, None),
    ]
    for event, revision, order in events:
        body = {key: item for key, item in event.payload.items()
                if key not in ("job_id", "expected_revision", "at")}
        if event.type in (1, 2, 6):
            body["availability_order"] = order
        raw = mutation_payload(event, revision, order)
        assert raw[41:] == value.encode_map(body), event.name
        assert decode_mutation(raw).event.payload == event.payload


U64 = 2**64 - 1
TIMES = st.integers(0, 2**63 - 1)


@given(job=st.binary(min_size=16, max_size=16).filter(any), at=TIMES,
       revision=st.integers(2, U64), attempt=st.integers(1, 65_535),
       token=st.integers(1, U64), order=st.none() | st.integers(1, U64),
       eligible=TIMES, args=st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=3))
@settings(max_examples=60, deadline=None)
def test_packed_mutation_payloads_equal_the_field_encoder(job, at, revision, attempt, token,
                                                          order, eligible, args):
    """The kinds packed in one step (a live insert, a start, a success) give the bytes the
    field encoder gives for the same body, and decode back to the same event."""
    import orjson

    from tay.engine.epoch import mutation_payload
    from tay.storage import events as ev
    from tay.storage.events.definition import LazyDefinition

    definition = LazyDefinition.from_args_json(
        orjson.dumps(args, option=orjson.OPT_SORT_KEYS), 1 + 2 * len(args), worker_key="t",
        queue_key="q", max_attempts=attempt, scheduled_at=None if order else eligible,
        timeout_ms=1_000)
    insert_at = eligible if order else min(at, eligible - 1) if eligible else None
    cases = [(ev.job_started(job, at, revision - 1, attempt, token), revision, None),
             (ev.job_finished(job, at, revision - 1, execution_token=token, outcome=ev.SUCCESS,
                              diagnostic_code=None, disposition=ev.COMPLETED), revision, None)]
    if insert_at is not None:
        cases.append((ev.job_inserted(job, insert_at, definition), 1, order))
    for event, new_revision, event_order in cases:
        body = {key: item for key, item in event.payload.items()
                if key not in ("job_id", "expected_revision", "at")}
        if event.type == 1:
            body["availability_order"] = event_order
        raw = mutation_payload(event, new_revision, event_order)
        assert raw[41:] == value.encode_map(body), event.name
        mutation = decode_mutation(raw)
        assert mutation.event.payload == event.payload
        assert (mutation.new_revision, mutation.availability_order) == (new_revision, event_order)


@given(job=st.binary(min_size=16, max_size=16).filter(any), at=TIMES,
       expected=st.integers(1, U64 - 1), result=json_values)
@settings(max_examples=60, deadline=None)
def test_a_packed_result_record_is_the_epoch_event_encoding(job, at, expected, result):
    """A live result_recorded is packed in one step: the same (30,2) bytes as the general
    epoch-event encoder, decoding back to the same event."""
    from tay.engine.epoch import result_payload
    from tay.storage import events as ev
    from tay.storage.v2.epoch_records import encode_epoch_event

    event = ev.result_recorded(job, at, expected, result)
    raw = result_payload(event, expected + 1)
    assert raw == encode_epoch_event(event, expected + 1)
    decoded = decode_epoch_event(raw)
    assert (decoded.event.payload, decoded.revision) == (event.payload, expected + 1)
