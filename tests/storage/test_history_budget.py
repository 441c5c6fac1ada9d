"""History caps: the budget mirrors the journal's real layout, admissions that would eat the
finishing reserve are refused, and finishing records always fit under the caps."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tay.failures import ConfigurationError, RequestRefused
from tay.storage.journal.history_budget import (
    RESERVE_BYTES_PER_EXECUTION,
    HistoryBudget,
    HistoryCaps,
    frame_size,
)
from tay.storage.journal.writer import init_store
from tests.storage.test_journal import data_dir, open_journal  # noqa: F401 (fixture)

MAX_FINISH_FRAME = 1_024  # what the 1,132-byte reserve holds besides a rotation


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


def fresh(caps: HistoryCaps, target: int = 10_000) -> HistoryBudget:
    return HistoryBudget(caps, target, history_bytes=44, segments=1, active_size=44)


def test_a_start_that_would_eat_the_reserve_is_refused_and_not_accounted():
    cap = 44 + 100 + RESERVE_BYTES_PER_EXECUTION
    budget = fresh(HistoryCaps(max_history_bytes=cap))
    budget.admit([100], active_executions=1)  # exactly fills history + one reserve
    with pytest.raises(RequestRefused) as refused:
        budget.admit([28], active_executions=1)
    assert (refused.value.code, refused.value.details["reason"]) == ("capacity", "max_history_bytes")
    assert budget.history_bytes == 44 + 100
    with pytest.raises(RequestRefused):
        budget.admit([], active_executions=2)  # a second execution needs its own reserve


def test_segment_cap_reserves_one_coordinate_per_active_execution():
    budget = fresh(HistoryCaps(max_segments=3))
    budget.admit([50], active_executions=2)
    with pytest.raises(RequestRefused) as refused:
        budget.admit([50], active_executions=3)
    assert refused.value.details["reason"] == "max_segments"
    budget.account([9_000] * 4)  # non-admissions are never refused, even past the cap
    assert budget.segments == 4


@pytest.mark.parametrize("seed", range(30))
def test_every_active_execution_can_always_finish_under_the_caps(seed):
    rng = random.Random(seed)
    target = rng.choice([1_200, 2_000, 5_000])
    caps = HistoryCaps(max_history_bytes=rng.randrange(3_000, 30_000),
                       max_segments=rng.randrange(2, 12))
    budget = fresh(caps, target)
    active = 0
    for _ in range(200):  # admit inserts and starts until the caps push back
        try:
            if rng.random() < 0.5:
                budget.admit([rng.randrange(28, 600)], active)
            else:
                budget.admit([rng.randrange(28, 300)], active + 1)
                active += 1
        except RequestRefused:
            pass
    for _ in range(active):  # every finish, at its largest, still fits
        budget.account([rng.choice([28, MAX_FINISH_FRAME])])
        assert budget.history_bytes <= caps.max_history_bytes
        assert budget.segments <= caps.max_segments


@pytest.mark.parametrize("option, value", [("max_history_bytes", 0), ("max_segments", -1),
                                           ("max_segments", 2.5), ("max_history_bytes", True)])
def test_caps_must_be_positive_integers(option, value):
    with pytest.raises(ConfigurationError) as refused:
        HistoryCaps(**{option: value})
    assert refused.value.option == option
