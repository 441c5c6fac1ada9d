"""History caps in the engine: every record but the end of an execution is admitted against
max_history_bytes / max_segments (with the finishing reserve of each running execution),
the end of an execution (finish, result, cancel while running) is accounted against that
reserve, and the engine's projection equals the real journal's bytes and segments."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.failures import ConfigurationError
from tay.storage.events import encode_event
from tay.storage.journal.history_budget import HistoryBudget, HistoryCaps
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tests.engine.conftest import Driver, executes, refusal, reply

HEADER = 44  # an empty active segment
RESERVE = HistoryBudget(HistoryCaps(), 64 * 1024 * 1024, history_bytes=HEADER, segments=1,
                        active_size=HEADER).reserve_bytes  # per running execution


def capped(**caps) -> Driver:
    driver = Driver(EngineConfig(**caps))
    budget = HistoryBudget(driver.engine.config.history_caps, 64 * 1024 * 1024,
                           history_bytes=HEADER, segments=1, active_size=HEADER)
    driver.engine.attach_history(budget)
    return driver


def reserve_for(result_bytes: int) -> int:
    return capped(result_bytes=result_bytes, error_bytes=100).engine.history.reserve_bytes


def worst_result(result_bytes: int) -> list[int]:
    """The largest Value a result within the limit can be: ``[0,0,...]``."""
    return [0] * ((result_bytes - 1) // 2)


def cancel(driver: Driver, job_id: str):
    return driver.run(c.Cancel("p", driver.rid(), job_id))



def _frame(event) -> int:
    from tay.storage.journal.history_budget import frame_size
    return frame_size(len(encode_event(event)))


def test_caps_are_validated_naming_the_option():
    for option in ("max_history_bytes", "max_segments"):
        with pytest.raises(ConfigurationError) as error:
            EngineConfig(**{option: 0})
        assert option in str(error.value)
    assert EngineConfig().history_caps == HistoryCaps()


def test_an_insert_over_the_cap_is_refused_and_changes_nothing():
    probe = Driver()
    insert_size = _frame(probe.enqueue(args={"n": 1}).events[0][1])
    driver = capped(max_history_bytes=HEADER + insert_size)
    reply(driver.enqueue(args={"n": 1}))  # exactly fits
    before = (dict(driver.engine.jobs), driver.engine.next_sequence,
              driver.engine.history.history_bytes)
    wire = refusal(driver.enqueue(args={"n": 2}))
    assert (wire["code"], wire["reason"]) == ("capacity", "max_history_bytes")
    assert (dict(driver.engine.jobs), driver.engine.next_sequence,
            driver.engine.history.history_bytes) == before


def test_a_refused_start_leaves_the_job_available_with_no_attempt_used():
    probe = Driver()
    probe.worker()
    out = probe.enqueue()
    insert_size, start_size = (_frame(event) for _, event in out.events)
    # the insert fits; the START does not, once its finishing reserve is counted
    cap = HEADER + insert_size + start_size + RESERVE - 1
    driver = capped(max_history_bytes=cap)
    driver.worker()
    out = driver.enqueue()
    job_id = reply(out).fields["job_id"]
    assert [event.name for _, event in out.events] == ["job_inserted"] and not executes(out)
    job = driver.status(job_id)
    assert (job["state"], job["attempt"]) == ("available", 0)
    assert driver.engine.durable_executing == 0
    assert not executes(driver.tick())  # tried again, refused again, still nothing changed
    assert driver.engine.history.history_bytes == HEADER + insert_size


def test_refused_starts_are_counted_by_cap_for_the_log_and_metrics():
    driver = capped(max_history_bytes=4_000)  # no room for a start's 65,536-byte result
    driver.worker()
    assert not executes(driver.enqueue())
    assert driver.engine.activity.start_refusals == {"max_history_bytes": 1}
    assert not executes(driver.tick())
    assert driver.engine.activity.start_refusals == {"max_history_bytes": 2}
    segments = capped(max_segments=1)
    segments.worker()
    assert not executes(segments.enqueue())
    assert segments.engine.activity.start_refusals == {"max_segments": 1}
    free = Driver()
    free.worker()
    assert executes(free.enqueue()) and not free.engine.activity.start_refusals


def test_one_reserve_per_running_execution_and_finishes_are_never_refused():
    probe = Driver()
    probe.worker()
    out = probe.enqueue()
    insert_size, start_size = (_frame(event) for _, event in out.events)
    # room for two inserts and one start with its reserve, not for a second start
    cap = HEADER + 2 * insert_size + start_size + RESERVE
    driver = capped(max_history_bytes=cap)
    driver.worker()
    (first,) = executes(driver.enqueue())
    assert not executes(driver.enqueue())
    assert driver.engine.durable_executing == 1
    done = driver.succeed(first, {"big": "x" * 900})  # finish + result: accounted, not refused
    assert [event.name for _, event in done.events] == ["result_recorded", "job_finished"]
    assert driver.engine.durable_executing == 0
    assert driver.engine.history.history_bytes > cap - RESERVE


def test_segment_cap_reserves_a_coordinate_per_start_and_refuses_with_its_own_reason():
    driver = capped(max_segments=1)
    driver.worker()
    out = driver.enqueue()  # the insert fits segment 1; its START would need a second one
    assert [event.name for _, event in out.events] == ["job_inserted"] and not executes(out)
    full = Driver(EngineConfig(max_segments=1))
    full.engine.attach_history(HistoryBudget(full.engine.config.history_caps, 64 * 1024 * 1024,
                                             history_bytes=2 * HEADER, segments=2,
                                             active_size=HEADER))
    wire = refusal(full.enqueue())
    assert (wire["code"], wire["reason"]) == ("capacity", "max_segments")


def test_the_engine_projection_equals_the_journal_it_feeds(tmp_path: Path):
    store = str(tmp_path / "store")
    init_store(store, durability="write")
    target = 4096
    done = recover(store, consumer=lambda *a: None, durability="write", rotation_target=target,
                   allow_small_rotation_target_for_tests=True)
    journal = done.journal
    driver = Driver(EngineConfig())
    driver.engine.attach_history(HistoryBudget.for_journal(journal, HistoryCaps()))
    driver.worker(capacity=3)
    written = 0
    for index in range(25):
        for execute in executes(driver.enqueue(args={"i": index, "pad": "p" * (index * 7)})):
            if index % 3:
                driver.succeed(execute, {"i": index})
            else:
                driver.fail(execute)
        driver.advance(2_000)
        driver.tick()
        batch = driver.journal[written:]
        written = len(driver.journal)
        journal.append_batch([(seq, e.type, e.schema, encode_event(e)) for seq, e in batch])
    journal.close()
    files = sorted((Path(store) / "segments").iterdir())
    assert len(files) > 2  # rotations happened
    budget = driver.engine.history
    assert (budget.history_bytes, budget.segments) == (sum(f.stat().st_size for f in files),
                                                       len(files))


def test_a_result_at_the_limit_cannot_pass_a_small_cap():
    """The 4,000-byte cap of issue 16: a start would need room for a 65,536-byte result,
    so it is refused and the history stays under the cap (it used to reach 66,001 bytes)."""
    driver = capped(max_history_bytes=4_000)
    driver.worker()
    out = driver.enqueue()
    assert [event.name for _, event in out.events] == ["job_inserted"] and not executes(out)
    assert driver.engine.history.history_bytes <= 4_000


def test_the_largest_result_fits_the_reserve_its_start_held():
    probe = Driver(EngineConfig(result_bytes=1_000, error_bytes=100))
    probe.worker()
    insert_size, start_size = (_frame(event) for _, event in probe.enqueue().events)
    cap = HEADER + insert_size + start_size + reserve_for(1_000)
    driver = capped(max_history_bytes=cap, result_bytes=1_000, error_bytes=100)
    driver.worker()
    (execute,) = executes(driver.enqueue())
    done = driver.succeed(execute, worst_result(1_000))
    assert [event.name for _, event in done.events] == ["result_recorded", "job_finished"]
    written = HEADER + sum(_frame(event) for _, event in driver.journal)
    assert written == driver.engine.history.history_bytes <= cap


def test_a_cancel_of_a_waiting_job_is_an_admission_a_running_one_uses_its_reserve():
    probe = Driver()
    probe.worker(capacity=1)
    insert_size, start_size = (_frame(event) for _, event in probe.enqueue().events)
    cap = HEADER + 2 * insert_size + start_size + RESERVE  # A runs, B waits: full
    driver = capped(max_history_bytes=cap)
    driver.worker(capacity=1)
    running = reply(driver.enqueue()).fields["job_id"]
    waiting = reply(driver.enqueue()).fields["job_id"]
    wire = refusal(cancel(driver, waiting))
    assert (wire["code"], wire["reason"]) == ("capacity", "max_history_bytes")
    assert driver.status(waiting)["state"] == "available"
    out = cancel(driver, running)  # the end of an execution: never refused
    assert [event.name for _, event in out.events] == ["job_cancelled"]
    assert driver.status(running)["state"] == "cancelled"
    # its reserve is released, so the waiting job's cancel fits now
    assert [event.name for _, event in cancel(driver, waiting).events] == ["job_cancelled"]
    assert driver.engine.history.history_bytes <= cap


def test_a_due_job_the_cap_holds_back_stays_waiting_and_is_looked_at_again():
    probe = Driver()
    insert_size = _frame(probe.enqueue(delay_ms=1_000).events[0][1])
    driver = capped(max_history_bytes=HEADER + insert_size)  # no room for job_available
    job_id = reply(driver.enqueue(delay_ms=1_000)).fields["job_id"]
    driver.advance(1_000)
    assert not driver.tick().events
    assert driver.status(job_id)["state"] == "scheduled"
    assert driver.engine.next_wakeup() == driver.mono + 1_000  # not lost, not busy


def test_a_schedule_occurrence_is_inserted_and_delivered_together_or_not_at_all():
    from tests.engine.test_schedule_engine import declare

    probe = Driver()
    declare(probe, every={"seconds": 10})
    registered = _frame(probe.journal[0][1])
    delivered = probe.tick()
    assert [event.name for _, event in delivered.events] == ["job_inserted", "schedule_delivered"]
    insert_size = _frame(delivered.events[0][1])
    driver = capped(max_history_bytes=HEADER + registered + insert_size)  # the insert alone fits
    declare(driver, every={"seconds": 10})
    assert not driver.tick().events and not driver.engine.jobs  # no half-delivered occurrence
    assert driver.engine.history.history_bytes == HEADER + registered


def test_a_skip_advance_the_cap_holds_back_is_retried_not_lost():
    from tests.engine.test_schedule_engine import declare

    def run_until_skip(driver: Driver) -> list:
        driver.worker()
        declare(driver, every={"seconds": 10}, overlap="skip")
        assert executes(driver.tick())  # the first occurrence runs (and stays running)
        driver.advance(10_000)
        return driver.tick().events

    probe = Driver()
    assert [event.name for _, event in run_until_skip(probe)] == ["schedule_state"]
    before_skip = HEADER + sum(_frame(event) for _, event in probe.journal[:-1])
    driver = capped(max_history_bytes=before_skip + RESERVE)  # the running job's reserve
    assert not run_until_skip(driver)
    assert driver.engine.history.history_bytes == before_skip
    assert driver.engine.next_wakeup() == driver.mono + 1_000


def test_failure_details_fit_the_reserve_its_start_held():
    probe = Driver(EngineConfig(result_bytes=10, error_bytes=2_000))
    probe.worker()
    insert_size, start_size = (_frame(event) for _, event in probe.enqueue().events)
    driver = capped(result_bytes=10, error_bytes=2_000)
    cap = HEADER + insert_size + start_size + driver.engine.history.reserve_bytes
    driver = capped(max_history_bytes=cap, result_bytes=10, error_bytes=2_000)
    driver.worker()
    (execute,) = executes(driver.enqueue())
    error = {"type": "E", "message": "m" * 900, "traceback": "t" * 1_000}
    done = driver.fail(execute, error)
    assert [event.name for _, event in done.events] == ["failure_recorded", "job_finished"]
    assert driver.engine.history.history_bytes <= cap


def test_a_purge_passes_the_caps_whole_or_is_refused_whole():
    from tests.engine.test_admin_ops import admin, refused

    probe = Driver()
    insert_size = _frame(probe.enqueue(queue="q").events[0][1])
    cancel_size = _frame(cancel(probe, reply(probe.enqueue(queue="q")).fields["job_id"]).events[0][1])
    # three waiting jobs, room for two of their cancels only
    driver = capped(max_history_bytes=HEADER + 3 * insert_size + 2 * cancel_size)
    for _ in range(3):
        driver.enqueue(queue="q")
    assert refused(driver, "purge_queue", queue="q") == "capacity"
    assert {entry.state.state for entry in driver.engine.jobs.values()} == {"available"}
    assert admin(driver, "purge_queue", queue="q", limit=2)["purged"] == 2


@pytest.mark.parametrize("seed", range(6))
def test_a_capped_engine_never_writes_past_its_caps(tmp_path: Path, seed: int):
    """A random workload (enqueues, some delayed; results up to the limit, the worst Value
    included; failures; cancels) against a real journal with a small rotation target: the
    segments on disk never pass either cap, and the caps were reached."""
    rng = random.Random(seed)
    store = str(tmp_path / "store")
    init_store(store, durability="write")
    done = recover(store, consumer=lambda *a: None, durability="write", rotation_target=4096,
                   allow_small_rotation_target_for_tests=True)
    journal = done.journal
    caps = dict(max_history_bytes=rng.randrange(30_000, 90_000), max_segments=rng.randrange(8, 40),
                result_bytes=2_000)
    driver = Driver(EngineConfig(**caps))
    driver.engine.attach_history(HistoryBudget.for_journal(journal, driver.engine.config.history_caps))
    driver.worker(capacity=3)
    running, refused, written = [], 0, 0
    for _ in range(150):
        roll = rng.random()
        if roll < 0.4:
            out = driver.enqueue(args={"pad": "p" * rng.randrange(0, 300)},
                                 **({"delay_ms": 500} if rng.random() < 0.3 else {}))
        elif roll < 0.75 and running:
            execute = running.pop(rng.randrange(len(running)))
            result = rng.choice([worst_result(2_000), "x" * 1_990, {"n": 1}, None])
            error = {"type": "E", "message": "m" * rng.randrange(0, 4_000)}
            out = driver.succeed(execute, result) if rng.random() < 0.7 else driver.fail(execute, error)
        elif roll < 0.85 and driver.engine.jobs:
            out = cancel(driver, rng.choice(list(driver.engine.jobs)).hex())
        else:
            driver.advance(600)
            out = driver.tick()
        refused += sum(1 for effect in out.effects if type(effect).__name__ == "Refuse"
                       and effect.failure.wire_error().get("code") == "capacity")
        running += executes(out)
        running = [e for e in running if e.reservation_id in driver.engine.executors.reservations]
        batch = driver.journal[written:]
        written = len(driver.journal)
        if batch:
            journal.append_batch([(seq, e.type, e.schema, encode_event(e)) for seq, e in batch])
        files = list((Path(store) / "segments").iterdir())
        on_disk = (sum(f.stat().st_size for f in files), len(files))
        assert on_disk == (driver.engine.history.history_bytes, driver.engine.history.segments)
        assert on_disk[0] <= caps["max_history_bytes"] and on_disk[1] <= caps["max_segments"]
    journal.close()
    assert refused, "the workload never reached a cap: this run checked nothing"
