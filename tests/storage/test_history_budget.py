"""History caps: the budget mirrors the journal's real layout, admissions that would eat the
finishing reserve are refused, and the end of every execution (its finish and its result at
the executor result limit) always fits under the caps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay.failures import ConfigurationError, RequestRefused
from tay.storage import events as ev
from tay.storage.journal.history_budget import (
    FINISH_FRAME_BYTES,
    HistoryBudget,
    HistoryCaps,
    frame_size,
    result_frame_bytes,
    failure_frame_bytes,
    json_value_bytes,
)
from tay.storage.events.operations import failure_recorded
from tay.storage.journal.writer import init_store
from tay.storage.v2.epoch_records import encode_epoch_event
from tests.storage.json_strategies import json_values
from tests.storage.test_journal import data_dir, open_journal  # noqa: F401 (fixture)

JOB = bytes(15) + b"\x01"
LARGEST = 2**63 - 1  # integers are fixed-width in a Value: any value gives the same size


def json_bytes(value) -> int:
    """The size the engine's result limit measures (tay.engine.validation.completion)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def carried_frame(event) -> int:
    """The event's frame inside a Store-v2 epoch tail (a (30,2) carrier, the larger form)."""
    return frame_size(len(encode_epoch_event(event, 2**64 - 1)))  # a fixed-width u64


def result_frame(value) -> int:
    return carried_frame(ev.result_recorded(JOB, LARGEST, LARGEST, value))


def on_disk(data_dir: str) -> tuple[int, int]:
    files = sorted((Path(data_dir) / "segments").glob("*.tay"))
    return sum(f.stat().st_size for f in files), len(files)


def test_the_budget_mirrors_the_journal_across_rotations(data_dir):
    init_store(data_dir, validated_filesystem=True)
    journal, _ = open_journal(data_dir, target=1_500)
    budget = HistoryBudget.for_journal(journal, HistoryCaps())
    rng = random.Random(14)
    sequence = 1
    for _ in range(40):
        payloads = [bytes(rng.randrange(0, 400)) for _ in range(rng.randrange(1, 4))]
        journal.append_batch([(sequence + i, 1, 1, p) for i, p in enumerate(payloads)])
        journal.sync()
        budget.account(frame_size(len(p)) for p in payloads)
        sequence += len(payloads)
        assert (budget.history_bytes, budget.segments) == on_disk(data_dir)
    assert budget.segments > 3
    journal.close()
    reopened, _ = open_journal(data_dir, target=1_500)  # the open journal knows its history too
    assert (reopened.history_bytes, reopened.segment_id) == on_disk(data_dir)
    reopened.close()


def fresh(caps: HistoryCaps, target: int = 64 * 1024 * 1024) -> HistoryBudget:
    return HistoryBudget(caps, target, history_bytes=44, segments=1, active_size=44)


def largest_finishing_frames() -> list[int]:
    finish = ev.job_finished(JOB, LARGEST, LARGEST, execution_token=LARGEST,
                             outcome=ev.WORKER_FAILURE, diagnostic_code=ev.DIAG_ERROR_RETURN,
                             disposition=ev.RETRYABLE, next_attempt=65_535, next_due_at=LARGEST)
    cancel = ev.job_cancelled(JOB, LARGEST, LARGEST, LARGEST)
    return [frame_size(len(ev.encode_event(event))) for event in (finish, cancel)]


def test_the_finish_frame_bound_holds():
    assert max(largest_finishing_frames()) <= FINISH_FRAME_BYTES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_the_result_bound_covers_any_json_result(value):
    size = json_bytes(value)
    assert result_frame(value) <= result_frame_bytes(size)
    assert len(ev.encode_event(ev.result_recorded(JOB, 1, 1, value))) - 95 <= json_value_bytes(size)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={"type": st.text(max_size=32),  # <= 128 bytes
                                           "message": st.text(max_size=300),
                                           "traceback": st.text(max_size=300)}).filter(bool))
def test_the_failure_bound_covers_any_error_object(error):
    frame = carried_frame(failure_recorded(JOB, LARGEST, LARGEST, error))
    assert frame <= failure_frame_bytes(json_bytes(error))


@pytest.mark.parametrize("limit", [1, 2, 3, 100, 65_536])
def test_the_result_bound_is_tight_for_a_list_of_digits(limit):
    """``[0,0,...]`` is the worst case: 2 JSON bytes, 9 Value bytes per element."""
    count = max(0, (limit - 1) // 2)
    worst = [0] * count if limit >= 2 else 0
    assert json_bytes(worst) <= limit
    assert result_frame_bytes(limit) - result_frame(worst) <= 9 + 4


def test_the_default_reserve_is_the_one_docs_journal_md_states():
    budget = fresh(HistoryCaps())
    assert (result_frame_bytes(65_536), budget.reserve_bytes, budget.reserve_segments) == (
        295_049, 296_181, 1)


def test_the_reserve_holds_the_finish_the_larger_details_and_a_rotation():
    budget = fresh(HistoryCaps(result_bytes=1_000, error_bytes=100))
    assert budget.reserve_bytes == FINISH_FRAME_BYTES + result_frame_bytes(1_000) + 44 + 64
    failing = fresh(HistoryCaps(result_bytes=10, error_bytes=1_000))  # the error is larger
    assert failing.reserve_bytes == FINISH_FRAME_BYTES + failure_frame_bytes(1_000) + 44 + 64
    assert budget.reserve_segments == 1
    # a rotation target smaller than a fresh segment holding both frames: two rotations
    small = fresh(HistoryCaps(result_bytes=1_000, error_bytes=100), target=2_000)
    assert small.reserve_segments == 2
    assert small.reserve_bytes == FINISH_FRAME_BYTES + result_frame_bytes(1_000) + 2 * (44 + 64)


def test_a_start_that_would_eat_the_reserve_is_refused_and_not_accounted():
    reserve = fresh(HistoryCaps()).reserve_bytes
    cap = 44 + 100 + reserve
    budget = fresh(HistoryCaps(max_history_bytes=cap))
    budget.admit([100], active_executions=1)  # exactly fills history + one reserve
    with pytest.raises(RequestRefused) as refused:
        budget.admit([28], active_executions=1)
    assert (refused.value.code, refused.value.details["reason"]) == ("capacity", "max_history_bytes")
    assert budget.history_bytes == 44 + 100
    with pytest.raises(RequestRefused):
        budget.admit([], active_executions=2)  # a second execution needs its own reserve
    with pytest.raises(RequestRefused):
        budget.check([28], active_executions=1)  # check refuses as admit does...
    budget.check([], active_executions=1)
    assert budget.history_bytes == 44 + 100  # ...and accounts nothing


def test_segment_cap_reserves_one_coordinate_per_active_execution():
    budget = fresh(HistoryCaps(max_segments=3, result_bytes=1_000, error_bytes=100), target=10_000)
    budget.admit([50], active_executions=2)
    with pytest.raises(RequestRefused) as refused:
        budget.admit([50], active_executions=3)
    assert refused.value.details["reason"] == "max_segments"
    budget.account([9_000] * 4)  # account never refuses (the reserve is the caller's promise)
    assert budget.segments == 4


@pytest.mark.parametrize("seed", range(30))
def test_every_active_execution_can_always_finish_under_the_caps(seed):
    """Admissions (inserts, starts, any other record) interleave with the end of executions
    (a finish at its largest, plus the largest result when it succeeds): the history never
    passes a cap, whatever the order."""
    rng = random.Random(seed)
    result_bytes = rng.choice([1, 200, 2_000, 65_536])
    target = rng.choice([1_200, 5_000, 20_000, 64 * 1024 * 1024])
    caps = HistoryCaps(max_history_bytes=rng.randrange(3_000, 1_500_000),
                       max_segments=rng.randrange(2, 40), result_bytes=result_bytes)
    budget = fresh(caps, target)
    finish, result = FINISH_FRAME_BYTES, result_frame_bytes(result_bytes)
    failure = failure_frame_bytes(caps.error_bytes)
    active = 0
    for _ in range(400):
        roll = rng.random()
        try:
            if roll < 0.35:
                budget.admit([rng.randrange(28, 600)], active)  # insert, cancel, schedule ...
            elif roll < 0.7:
                budget.admit([rng.randrange(28, 300)], active + 1)  # a start
                active += 1
            elif active:  # an execution ends: succeeds, fails with details, or times out
                budget.account(rng.choice([[finish, result], [finish, failure], [finish]]))
                active -= 1
        except RequestRefused:
            pass
        assert budget.history_bytes <= caps.max_history_bytes
        assert budget.segments <= caps.max_segments
    for _ in range(active):  # every running execution still ends at its largest
        budget.account([finish, max(result, failure)])
        assert budget.history_bytes <= caps.max_history_bytes
        assert budget.segments <= caps.max_segments


@pytest.mark.parametrize("option, value", [("max_history_bytes", 0), ("max_segments", -1),
                                           ("max_segments", 2.5), ("max_history_bytes", True)])
def test_caps_must_be_positive_integers(option, value):
    with pytest.raises(ConfigurationError) as refused:
        HistoryCaps(**{option: value})
    assert refused.value.option == option


def placed(history: HistoryBudget) -> tuple[int, int, int, int]:
    """Every field of the layout and the room, frames waiting in ``unplaced`` placed."""
    history.place()
    layout = history.layout
    return (layout.history_bytes, layout.segments, layout.active_size, history.room)


@given(lengths=st.lists(st.integers(0, 3000), max_size=40), target=st.integers(1024, 8192))
@settings(max_examples=60, deadline=None)
def test_accounting_one_payload_is_accounting_its_frame(lengths, target):
    """The engine's per-commit shortcut moves the projection exactly as ``account`` does,
    rotations included."""
    one, many = fresh(HistoryCaps(), target), fresh(HistoryCaps(), target)
    for length in lengths:
        one.account_payload(length)
        many.account((frame_size(length),))
        assert placed(one) == placed(many)


@given(pairs=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000)), max_size=30),
       target=st.integers(1024, 8192))
@settings(max_examples=60, deadline=None)
def test_accounting_two_payloads_is_accounting_both_frames(pairs, target):
    """A success's two records accounted in one call move the projection exactly as two
    frames through ``account`` do, a rotation before either or between them included."""
    two, many = fresh(HistoryCaps(), target), fresh(HistoryCaps(), target)
    for first, second in pairs:
        two.account_payloads(first, second)
        many.account((frame_size(first), frame_size(second)))
        assert placed(two) == placed(many)


def test_accounting_two_payloads_at_every_fill_of_a_small_segment():
    """Every second length up to past a 1 KiB rotation target after a first pair: the exact
    fit, one byte over, and a rotation between the two frames all account as ``account``."""
    for second in range(0, 1200):
        two, many = fresh(HistoryCaps(), 1024), fresh(HistoryCaps(), 1024)
        two.account_payloads(100, 100)
        many.account((frame_size(100), frame_size(100)))
        two.account_payloads(50, second)
        many.account((frame_size(50), frame_size(second)))
        assert placed(two) == placed(many), second
