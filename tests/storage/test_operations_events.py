"""Our literal fixtures for the operations pairs (20..29 and 32, schema 2): decode, re-encode byte
exact, replay through the one transition function, and the refusals."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tay.engine import Engine, EngineConfig
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events import operations as op
from tay.storage.events.definition import PayloadRefused
from tay.storage.events.transitions import JobTable, TransitionRejected
from tay.storage.formats import record

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "tay" / "events" / "operations"
ERROR = {"message": "bad input", "traceback": "Traceback ...\nValueError: bad input\n",
         "type": "ValueError"}


def frames(name: str) -> list[record.Record]:
    return record.decode_stream(bytes.fromhex("".join((FOLDER / name).read_text().split())))


def events(name: str) -> list[tuple[int, ev.Event]]:
    return [(f.sequence, ev.decode_event(f.type, f.schema, f.payload)) for f in frames(name)]


def test_sha256sums_match_every_line() -> None:
    lines = (FOLDER / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 14
    for line in lines:
        digest, name = line.split("  ")
        data = bytes.fromhex("".join((FOLDER / name).read_text().split()))
        assert hashlib.sha256(data).hexdigest() == digest, name


@pytest.mark.parametrize("name", ["queue_control.hex", "failure_recorded.hex", "job_requeued.hex",
                                  "queue_scaled.hex", "schedule_control.hex",
                                  "job_expedited.hex", "queue_rate_limited.hex",
                                  "job_deleted.hex", "day_totals.hex"])
def test_fixtures_reencode_byte_exact(name: str) -> None:
    for f in frames(name):
        event = ev.decode_event(f.type, f.schema, f.payload)
        assert ev.encode_event(ev.make_event(event.pair, dict(event.payload))) == f.payload


def test_queue_control_fixture_pauses_then_resumes() -> None:
    (_, paused), (_, resumed) = events("queue_control.hex")
    assert paused.name == "queue_paused" and paused["queue"] == "q" and paused.at == 100
    assert resumed.name == "queue_resumed" and resumed.at == 101
    engine = Engine(EngineConfig())
    engine.consume_event(1, paused)
    assert engine.paused == {"q"}
    engine.consume_event(2, resumed)
    assert engine.paused == set() and engine.next_sequence == 3


def test_queue_scaled_fixture_sets_then_returns_to_the_configured_credits() -> None:
    (_, scaled), (_, reset) = events("queue_scaled.hex")
    assert scaled.name == "queue_scaled" and (scaled["queue"], scaled["concurrency"]) == ("q", 3)
    assert reset.at == 101 and reset["concurrency"] is None
    engine = Engine(EngineConfig(queues={"q": 5}))
    engine.consume_event(1, scaled)
    assert engine.scaled == {"q": 3} and engine.credit_limits["q"] == 3
    engine.consume_event(2, reset)
    assert engine.scaled == {} and engine.credit_limits["q"] == 5 and engine.next_sequence == 3
    assert ev.encode_event(op.queue_scaled("q", 3, 100)) == frames("queue_scaled.hex")[0].payload


def test_queue_scaled_zero_fixture_is_refused() -> None:
    (only,) = frames("queue_scaled_zero_refused.hex")
    with pytest.raises(PayloadRefused) as refused:
        ev.decode_event(only.type, only.schema, only.payload)
    assert (refused.value.kind, refused.value.field) == ("invalid_payload",
                                                         "queue_scaled.concurrency")


def test_schedule_control_fixture_pauses_then_resumes_a_schedule() -> None:
    (_, registered), (_, paused), (_, resumed) = events("schedule_control.hex")
    t0 = 1_767_225_600_000
    assert registered.name == "schedule_state" and registered["action"] == "registered"
    assert paused.name == "schedule_paused" and paused["schedule_id"] == "nightly"
    assert (paused.at, resumed.name, resumed.at) == (t0 + 60_000, "schedule_resumed",
                                                    t0 + 120_000)
    engine = Engine(EngineConfig())
    engine.consume_event(1, registered)
    engine.consume_event(2, paused)
    assert engine.schedules.paused == {"nightly"} and engine.next_wakeup() is None
    engine.consume_event(3, resumed)
    assert engine.schedules.paused == set() and engine.next_sequence == 4
    assert ev.encode_event(op.schedule_paused("nightly", t0 + 60_000)) == \
        frames("schedule_control.hex")[1].payload


def test_a_pause_of_an_unknown_schedule_is_refused_on_replay() -> None:
    (_, _), (_, paused), _ = events("schedule_control.hex")
    with pytest.raises(RecoveryRefused) as refused:
        Engine(EngineConfig()).consume_event(2, paused)
    assert refused.value.reason == "unknown_schedule"


def test_schedule_paused_empty_id_fixture_is_refused() -> None:
    (only,) = frames("schedule_paused_empty_id_refused.hex")
    with pytest.raises(PayloadRefused) as refused:
        ev.decode_event(only.type, only.schema, only.payload)
    assert (refused.value.kind, refused.value.field) == ("invalid_payload",
                                                         "schedule_paused.schedule_id")


def test_failure_fixture_replays_to_a_discarded_job_with_its_error() -> None:
    table = JobTable()
    for sequence, event in events("failure_recorded.hex"):
        job = table.apply(sequence, event)
    assert job.state == "discarded" and job.revision == 4 and job.failure == ERROR
    assert ev.encode_event(op.failure_recorded(job.id, 102, 3, ERROR)) == frames(
        "failure_recorded.hex")[-1].payload


def test_requeue_fixture_replays_to_a_new_cycle() -> None:
    table = JobTable()
    for sequence, event in events("job_requeued.hex"):
        job = table.apply(sequence, event)
    assert (job.state, job.attempt, job.next_attempt, job.cycle, job.eligible_at, job.revision) \
        == ("available", 0, 1, 3, 102, 3)


def test_expedite_fixture_replays_to_available_now() -> None:
    table = JobTable()
    (_, inserted), (_, expedited) = events("job_expedited.hex")
    assert table.apply(1, inserted).state == "scheduled"
    assert expedited.name == "job_expedited" and expedited.at == 200
    job = table.apply(2, expedited)
    assert (job.state, job.eligible_at, job.ready_order, job.attempt, job.next_attempt,
            job.cycle, job.revision) == ("available", 200, 2, 0, 1, 1, 2)
    with pytest.raises(TransitionRejected) as refused:  # only a scheduled job
        table.apply(3, op.job_expedited(job.id, 201, 2))
    assert refused.value.guard == "expedite_from_wrong_state"
    assert ev.encode_event(op.job_expedited(job.id, 200, 1)) == frames(
        "job_expedited.hex")[-1].payload


def test_delete_fixture_replays_to_no_job_and_frees_the_id() -> None:
    """The table and an engine alike: gone after (29,2), its id free for a new insert; a
    deletion of a job that is not finished, at a stale revision, or of no job is refused."""
    replayed = events("job_deleted.hex")
    (_, inserted), (_, cancelled), (_, deleted) = replayed
    assert deleted.name == "job_deleted" and deleted.at == 200
    job_id = bytes(15) + b"\x07"
    table = JobTable()
    table.apply(1, inserted)
    assert table.apply(2, cancelled).state == "cancelled"
    table.apply(3, deleted)
    assert table.get(job_id) is None and set(table.counts().values()) == {0}
    assert table.apply(4, inserted).state == "available"  # the id is a new job's
    engine = Engine(EngineConfig())
    for sequence, event in replayed:
        engine.consume_event(sequence, event)
    assert engine.job(job_id) is None and engine.job_count() == 0
    assert engine.budget.used == 0
    assert ev.encode_event(op.job_deleted(job_id, 200, 2)) == frames(
        "job_deleted.hex")[-1].payload
    refusals = JobTable()
    refusals.apply(1, inserted)
    for sequence, event, guard in ((2, op.job_deleted(job_id, 120, 1), "delete_from_wrong_state"),
                                   (3, op.job_deleted(job_id, 120, 2), "revision_mismatch"),
                                   (4, op.job_deleted(bytes(15) + b"\x09", 120, 1), "job_absent")):
        with pytest.raises(TransitionRejected) as refused:
            refusals.apply(sequence, event)
        assert refused.value.guard == guard


def test_rate_limit_fixture_limits_then_lifts() -> None:
    (_, limited), (_, lifted) = events("queue_rate_limited.hex")
    assert limited.name == "queue_rate_limited" and limited["queue"] == "q"
    assert (limited["starts"], limited["period_ms"], lifted["starts"], lifted["period_ms"]) \
        == (10, 1_000, None, None)
    engine = Engine(EngineConfig())
    engine.consume_event(1, limited)
    assert engine.rates.limits == {"q": (10, 1_000)}
    engine.consume_event(2, lifted)
    assert engine.rates.limits == {} and engine.next_sequence == 3
    (half,) = frames("queue_rate_limited_half_refused.hex")
    with pytest.raises(PayloadRefused) as refused:
        ev.decode_event(half.type, half.schema, half.payload)
    assert (refused.value.kind, refused.value.field) == ("invalid_payload",
                                                         "queue_rate_limited.starts")


def test_day_totals_fixture_keeps_each_days_last_totals() -> None:
    (_, first), (_, last) = events("day_totals.hex")
    assert first.name == "day_totals" and first.at == 86_400_500
    assert [(e["day"], e["enqueued"], e["completed"], e["failed"]) for e in (first, last)] \
        == [(1, 9, 7, 2), (1, 9, 8, 3)]
    engine = Engine(EngineConfig())
    engine.consume_event(1, first)
    engine.consume_event(2, last)
    assert engine.day_history.recorded == {1: (9, 8, 3)} and engine.next_sequence == 3
    assert engine.day_history.totals({}) == {1: (9, 8, 3)}
    (negative,) = frames("day_totals_negative_refused.hex")
    with pytest.raises(PayloadRefused) as refused:
        ev.decode_event(negative.type, negative.schema, negative.payload)
    assert (refused.value.kind, refused.value.field) == ("invalid_payload",
                                                         "day_totals.completed")


def test_unknown_error_key_fixture_is_refused() -> None:
    (only,) = frames("failure_unknown_key_refused.hex")
    with pytest.raises(PayloadRefused) as refused:
        ev.decode_event(only.type, only.schema, only.payload)
    assert refused.value.kind == "invalid_payload"
    assert refused.value.field == "failure_recorded.error"


@pytest.mark.parametrize("error", [{}, {"type": 1}, {"type": "x" * 129}, {"other": "x"}])
def test_failure_payload_rules(error) -> None:
    with pytest.raises(PayloadRefused):
        op.failure_recorded(bytes(15) + b"\x04", 1, 1, error)


def test_transitions_refuse_failure_and_requeue_from_wrong_states() -> None:
    table = JobTable()
    inserted = events("job_requeued.hex")[0][1]
    table.apply(1, inserted)
    job_id = inserted.job_id
    with pytest.raises(TransitionRejected) as refused:
        table.apply(2, op.job_requeued(job_id, 101, 1))
    assert refused.value.guard == "requeue_from_wrong_state"
    with pytest.raises(TransitionRejected) as refused:
        table.apply(2, op.failure_recorded(job_id, 101, 1, ERROR))
    assert refused.value.guard == "failure_for_job_without_failure"


# ---- through Store-v2 compaction ---------------------------------------------------------

def test_failure_details_and_a_requeue_survive_offline_compaction(data_dir) -> None:
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.journal.writer import init_store
    from tay.storage.recovery.recover import TableConsumer, recover

    init_store(str(data_dir), durability="write")
    journal = recover(str(data_dir), durability="write").journal
    history = [(s, e) for s, e in events("failure_recorded.hex")]
    requeue = events("job_requeued.hex")
    history += [(s + 4, e if e.pair != op.JOB_REQUEUED else
                 op.job_requeued(e.job_id, e.at, e.expected_revision + 4))
                for s, e in requeue[:2]]
    history.append((7, op.job_requeued(requeue[0][1].job_id, 102, 6)))
    # job 0..05's cancel names its insert (seq 5) as the expected revision
    history[5] = (6, ev.job_cancelled(requeue[0][1].job_id, 101, 5, None))
    journal.append_batch(ev.journal_records(history))
    journal.sync()
    journal.close()
    from tay.storage.v2 import Retention

    compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)
    table = TableConsumer()
    assert recover(str(data_dir), consumer=table, activate=False).store_version == 2
    jobs = {job.id: job for job in table.table}
    failed = jobs[bytes(15) + b"\x04"]
    assert failed.state == "discarded" and failed.failure == ERROR
    requeued = jobs[bytes(15) + b"\x05"]
    assert (requeued.state, requeued.attempt, requeued.next_attempt) == ("available", 0, 1)


def test_a_store_with_queue_control_is_refused_by_compaction_not_emptied(data_dir) -> None:
    from tay.failures import RecoveryRefused
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.journal.writer import init_store
    from tay.storage.recovery.recover import TableConsumer, recover

    init_store(str(data_dir), durability="write")
    journal = recover(str(data_dir), durability="write").journal
    journal.append_batch(ev.journal_records(events("queue_control.hex")))
    journal.sync()
    journal.close()
    with pytest.raises(RecoveryRefused) as refused:
        compact_offline(str(data_dir), consumer=TableConsumer(), durability="write")
    assert refused.value.reason == "state_not_carried"
