"""History caps in the engine: inserts and starts are admitted against max_history_bytes /
max_segments (with the finishing reserve), every other event is accounted, and the
engine's projection equals the real journal's bytes and segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tay.engine import EngineConfig
from tay.failures import ConfigurationError
from tay.storage.events import encode_event
from tay.storage.journal.history_budget import RESERVE_BYTES_PER_EXECUTION, HistoryBudget, HistoryCaps
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tests.engine.conftest import Driver, executes, refusal, reply

HEADER = 44  # an empty active segment


def capped(**caps) -> Driver:
    driver = Driver(EngineConfig(**caps))
    budget = HistoryBudget(driver.engine.config.history_caps, 64 * 1024 * 1024,
                           history_bytes=HEADER, segments=1, active_size=HEADER)
    driver.engine.attach_history(budget)
    return driver



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
    cap = HEADER + insert_size + start_size + RESERVE_BYTES_PER_EXECUTION - 1
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


def test_one_reserve_per_running_execution_and_finishes_are_never_refused():
    probe = Driver()
    probe.worker()
    out = probe.enqueue()
    insert_size, start_size = (_frame(event) for _, event in out.events)
    # room for two inserts and one start with its reserve, not for a second start
    cap = HEADER + 2 * insert_size + start_size + RESERVE_BYTES_PER_EXECUTION
    driver = capped(max_history_bytes=cap)
    driver.worker()
    (first,) = executes(driver.enqueue())
    assert not executes(driver.enqueue())
    assert driver.engine.durable_executing == 1
    done = driver.succeed(first, {"big": "x" * 900})  # finish + result: accounted, not refused
    assert [event.name for _, event in done.events] == ["job_finished", "result_recorded"]
    assert driver.engine.durable_executing == 0
    assert driver.engine.history.history_bytes > cap - RESERVE_BYTES_PER_EXECUTION


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
