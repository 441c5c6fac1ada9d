"""Recovery: replaying journal events through Engine.replay and settling at finish_recovery."""

from pathlib import Path

import pytest

from tay.engine import EngineConfig, Refuse
from tay.engine import commands as c
from tay.failures import RecoveryRefused
from tay.storage.events import decode_event, encode_event
from tay.storage.formats.record import decode_record
from tests.engine.conftest import Driver, executes, refusal, reply

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "events" / "v1"


def fixture_record(name: str):
    text = (FIXTURES / f"{name}.hex").read_text()
    return decode_record(bytes.fromhex("".join(text.split())))


def replay_journal(journal, config=None) -> Driver:
    fresh = Driver(config)
    for sequence, event in journal:
        fresh.engine.replay(sequence, event.type, event.schema, encode_event(event))
    return fresh


def durable_state(driver: Driver) -> dict:
    return {job_id: entry.state for job_id, entry in driver.engine.jobs.items()
            if not entry.volatile}


def test_upstream_lifecycle_fixtures_replay_in_sequence_order():
    fresh = Driver()
    for name in ("E1", "E2", "E3", "E4", "E6", "E5"):
        record = fixture_record(name)
        fresh.engine.replay(record.sequence, record.type, record.schema, record.payload)
    job = fresh.engine.job(bytes(15) + b"\x01")
    assert job.state == "cancelled" and job.attempt == 1 and job.revision == 6
    assert fresh.engine.next_sequence == 7
    assert fresh.engine.state_counts() == {"cancelled": 1}


def test_upstream_fixture_out_of_order_is_refused():
    fresh = Driver()
    record = fixture_record("E2")
    with pytest.raises(RecoveryRefused) as refused:
        fresh.engine.replay(record.sequence, record.type, record.schema, record.payload)
    assert refused.value.kind == "consumer_rejected"


def test_upstream_intermediate_state_after_e4_is_retryable_due_1011():
    fresh = Driver()
    for name in ("E1", "E2", "E3", "E4"):
        record = fixture_record(name)
        fresh.engine.replay(record.sequence, record.type, record.schema, record.payload)
    job = fresh.engine.job(bytes(15) + b"\x01")
    assert (job.state, job.next_attempt, job.eligible_at) == ("retryable", 2, 1011)


def test_replayed_journal_reproduces_state_and_results():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(args={"n": 1}))
    driver.succeed(execute, {"ok": None})
    scheduled = driver.job_id(delay_ms=60_000)
    fresh = replay_journal(driver.journal)
    assert durable_state(fresh) == durable_state(driver)
    assert fresh.engine.next_sequence == driver.engine.next_sequence
    assert reply(fresh.run(c.Result("p", "x", execute.job_id))).fields["result"] == {"ok": None}
    assert fresh.status(scheduled)["state"] == "scheduled"
    assert fresh.engine.budget.used == driver.engine.budget.used


def test_volatile_jobs_produce_no_events_and_vanish_on_replay():
    driver = Driver()
    driver.worker()
    out = driver.enqueue(durability="volatile", retries=1)
    (execute,) = executes(out)
    assert not out.events
    driver.fail(execute)
    assert driver.journal == []
    fresh = replay_journal(driver.journal)
    assert refusal(fresh.run(c.Status("p", "x", execute.job_id)))["code"] == "not_found"


def test_finish_recovery_interrupts_executing_jobs_at_same_attempt():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(retries=2))
    fresh = replay_journal(driver.journal)
    out = fresh.engine.finish_recovery(fresh.now, fresh.mono)
    (_, finished), = out.events
    assert finished["outcome"] == 3 and finished["next_attempt"] == 1
    assert fresh.now + 1000 <= finished["next_due_at"] <= fresh.now + 1250
    assert fresh.status(execute.job_id)["state"] == "retryable"
    # Replaying the settled history too gives the same state again (one apply path).
    again = replay_journal(driver.journal + out.events)
    assert durable_state(again) == durable_state(fresh)


def test_recovery_over_state_budget_is_refused_with_required_and_configured_bytes():
    driver = Driver()
    for _ in range(3):
        driver.enqueue()
    fresh = replay_journal(driver.journal, EngineConfig(max_state_bytes=1000))
    with pytest.raises(RecoveryRefused) as refused:
        fresh.engine.finish_recovery(fresh.now, fresh.mono)
    report = refused.value.report()
    assert report["configured"] == 1000 and report["required"] == driver.engine.budget.used
    needed = driver.engine.budget.admitted  # = used: nothing ran past admission here
    assert f"--max-state-bytes {needed}" in refused.value.message
    assert "tay storage compact" in refused.value.message


def test_replay_refuses_a_sequence_that_does_not_increase():
    driver = Driver()
    driver.enqueue()
    driver.enqueue()
    (first, second) = driver.journal
    fresh = Driver()
    fresh.engine.replay(second[0], 1, 1, encode_event(second[1]))
    with pytest.raises(RecoveryRefused):
        fresh.engine.replay(first[0], 1, 1, encode_event(first[1]))


def test_recovery_batch_path_into_the_engine_equals_record_by_record_replay(tmp_path):
    from tay.storage.journal.writer import init_store
    from tay.storage.recovery.recover import recover

    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(args={"n": [1, {"k": "v"}]}))
    driver.succeed(execute, {"ok": 1})
    driver.enqueue(args={"pending": True})
    driver.job_id(delay_ms=60_000)
    store = tmp_path / "store"
    init_store(str(store), durability="write")
    journal = recover(str(store), consumer=lambda *a: None, durability="write").journal
    journal.append_batch([(seq, e.type, e.schema, encode_event(e)) for seq, e in driver.journal])
    journal.close()
    batched = Driver()
    assert hasattr(batched.engine, "consume_event") and batched.engine.limits is not None
    done = recover(str(store), consumer=batched.engine, activate=False)
    assert done.records_replayed == len(driver.journal)
    one_by_one = replay_journal(driver.journal)
    assert durable_state(batched) == durable_state(one_by_one) == durable_state(driver)
    assert batched.engine.budget.used == one_by_one.engine.budget.used == driver.engine.budget.used
    assert batched.engine.next_sequence == driver.engine.next_sequence


def test_consume_event_refuses_a_sequence_that_does_not_increase():
    fresh = Driver()
    first = fixture_record("E1")
    fresh.engine.replay(first.sequence, first.type, first.schema, first.payload)
    event = decode_event(first.type, first.schema, first.payload)
    with pytest.raises(RecoveryRefused) as refused:
        fresh.engine.consume_event(first.sequence, event)
    assert (refused.value.kind, refused.value.reason) == ("consumer_rejected",
                                                          "sequence_not_increasing")


def test_a_store_the_same_budget_filled_by_finishing_work_always_reopens():
    """Issue 11 item 5: admission fills the budget, then completions and results push the
    charged state past it. Recovery with the very same budget accepts that state (only the
    admitted part must fit), and admission stays closed until state is released."""
    from tay.engine import Execute

    config = EngineConfig(max_state_bytes=30_000)
    driver = Driver(config)
    driver.worker(capacity=64)
    executes = []
    while True:
        out = driver.enqueue(args={"n": len(executes)})
        if any(isinstance(e, Refuse) for e in out.effects):
            break
        executes += [e for e in out.effects if isinstance(e, Execute)]
    assert executes, "at least one job fits the budget"
    for execute in executes:
        driver.succeed(execute, {"payload": "r" * 2_000})
    budget = driver.engine.budget
    assert budget.used > budget.limit >= budget.admitted  # finishing work used the margin
    fresh = replay_journal(driver.journal, config)
    fresh.engine.finish_recovery(fresh.now, fresh.mono)  # reopens: nothing refused
    assert fresh.engine.budget.used == budget.used
    error = refusal(fresh.enqueue(submission_id="after-restart"))
    assert (error["code"], error["reason"]) == ("capacity", "retained_bytes")
    assert error["required"] > error["configured"] == 30_000
    assert "--max-state-bytes" in error["message"] and "retention" in error["message"]

