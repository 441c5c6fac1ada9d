"""The compaction policy's rules: the history size/ratio trigger, the state trigger, the
retention trigger and the dead-tail trigger."""

from __future__ import annotations

import pytest

from tay.storage.compaction.trigger import (DEAD_TAIL_MIN_BYTES, DEAD_TAIL_RATIO,
                                            CompactionPolicy, RetentionTrigger, StateTrigger,
                                            retention_slack_ms)

LIMIT = 256 * 2**20
FLOOR = LIMIT // 16  # the least a compaction must release: 16 MiB ...
HALF = LIMIT // 2
WORTH = HALF // 4  # ... or a quarter of the state, here 32 MiB
NEAR = LIMIT - LIMIT // 8 + 1  # less than 1/8 of the budget left


def test_the_history_trigger_needs_both_the_size_and_the_ratio() -> None:
    policy = CompactionPolicy(history_bytes=1000, ratio=2.0)
    assert not policy.due(999, 0)
    assert not policy.due(1500, 800)
    assert policy.due(1600, 800)
    assert not CompactionPolicy(enabled=False, history_bytes=1000).due(10**9, 0)


def test_the_state_trigger_waits_for_the_ratio_and_for_enough_to_release() -> None:
    policy = CompactionPolicy(state_ratio=0.5)
    assert not policy.state_pressed(HALF - 1, LIMIT)
    assert policy.state_pressed(HALF, LIMIT)
    assert not policy.state_due(HALF - 1, LIMIT, LIMIT)  # below the ratio: never
    assert not policy.state_due(HALF, LIMIT, 0)  # nothing expires: never
    assert not policy.state_due(HALF, LIMIT, WORTH - 1)  # too little for a rewrite
    assert policy.state_due(HALF, LIMIT, WORTH)
    assert policy.state_worth(LIMIT // 8, LIMIT) == FLOOR  # a small state: the floor
    # close to the limit anything released is worth it
    assert not policy.state_due(NEAR - 1, LIMIT, 1)
    assert policy.state_due(NEAR, LIMIT, 1)
    assert not CompactionPolicy(enabled=False).state_due(LIMIT, LIMIT, LIMIT)


@pytest.mark.parametrize("ratio", [0, 0.01, 0.96, 1, 2, float("nan"), "0.5"])
def test_a_state_ratio_outside_its_range_is_refused(ratio) -> None:
    with pytest.raises(ValueError, match="state_ratio must be between 0.05 and 0.95"):
        CompactionPolicy(state_ratio=ratio)


class Jobs:
    """A stand-in for the engine's expiry pass: what is releasable at a time."""

    def __init__(self, expiries: dict[int, int]) -> None:
        self.expiries = expiries  # expiry ms -> charged bytes
        self.looks = 0

    def __call__(self, now_ms: int) -> tuple[int, int | None]:
        self.looks += 1
        released = sum(size for at, size in self.expiries.items() if at <= now_ms)
        later = [at for at in self.expiries if at > now_ms]
        return released, min(later) if later else None


def test_the_state_trigger_backs_off_until_the_earliest_expiry_or_growth() -> None:
    trigger = StateTrigger(CompactionPolicy(state_ratio=0.5))
    half = HALF
    jobs = Jobs({10_000: WORTH, 20_000: WORTH})
    assert not trigger.due(half - 1, LIMIT, 0, jobs) and jobs.looks == 0  # below the ratio
    assert not trigger.due(half, LIMIT, 0, jobs) and jobs.looks == 1
    for now in range(1, 10_000, 500):  # checks every 0.5 s: no pass over the jobs
        assert not trigger.due(half, LIMIT, now, jobs)
    assert jobs.looks == 1
    assert trigger.due(half, LIMIT, 10_000, jobs) and jobs.looks == 2  # the expiry passed


def test_the_state_trigger_looks_again_when_the_state_grows() -> None:
    trigger = StateTrigger(CompactionPolicy(state_ratio=0.5))
    half = HALF
    jobs = Jobs({})  # live jobs only: nothing ever expires
    assert not trigger.due(half, LIMIT, 0, jobs)
    assert not trigger.due(half + LIMIT // 64 - 1, LIMIT, 10**12, jobs) and jobs.looks == 1
    assert not trigger.due(half + LIMIT // 64, LIMIT, 10**12, jobs) and jobs.looks == 2


def test_the_state_trigger_rescans_a_small_release_and_asks_near_the_limit_once_a_minute():
    trigger = StateTrigger(CompactionPolicy(state_ratio=0.5))
    jobs = Jobs({0: 100})  # releasable, but far less than a quarter of the state
    assert not trigger.due(LIMIT // 2, LIMIT, 1, jobs)
    assert not trigger.due(LIMIT // 2, LIMIT, 29_000, jobs) and jobs.looks == 1
    assert not trigger.due(LIMIT // 2, LIMIT, 31_001, jobs) and jobs.looks == 2
    near = NEAR  # little headroom: anything releasable is worth it ...
    assert trigger.due(near, LIMIT, 40_000, jobs)
    assert not trigger.due(near, LIMIT, 80_000, jobs)  # ... at most once a minute
    assert trigger.due(near, LIMIT, 100_000, jobs)


HOUR = 3_600_000


def test_the_retention_slack_is_half_the_retention_and_at_least_an_hour() -> None:
    assert retention_slack_ms(HOUR) == HOUR
    assert retention_slack_ms(90 * 60_000) == HOUR
    assert retention_slack_ms(24 * HOUR) == 12 * HOUR


class Oldest:
    """The engine's oldest terminal job, counting how often it was asked."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.asked = 0

    def __call__(self) -> int | None:
        self.asked += 1
        return self.at


def test_the_retention_trigger_is_due_once_the_oldest_terminal_job_outlived_the_slack() -> None:
    trigger = RetentionTrigger(CompactionPolicy())
    oldest = Oldest(10 * HOUR)
    due_at = 10 * HOUR + 24 * HOUR + 12 * HOUR  # finished, its retention, the slack
    assert not trigger.due(due_at - 1, 24 * HOUR, oldest)
    assert oldest.asked == 1
    # the answer holds until then: a job finishing later cannot be the older one
    for now in (due_at - 1000, due_at - 1):
        assert not trigger.due(now, 24 * HOUR, oldest)
    assert oldest.asked == 1
    assert trigger.due(due_at, 24 * HOUR, oldest)
    assert oldest.asked == 2
    # one per slack: a job the compaction could not expire does not make it loop
    assert not trigger.due(due_at + 12 * HOUR - 1, 24 * HOUR, oldest)
    assert oldest.asked == 2
    assert trigger.due(due_at + 12 * HOUR, 24 * HOUR, oldest)


def test_the_retention_trigger_waits_a_whole_window_when_nothing_finished() -> None:
    trigger = RetentionTrigger(CompactionPolicy())
    oldest = Oldest(None)
    assert not trigger.due(5 * HOUR, HOUR, oldest)
    assert not trigger.due(5 * HOUR + 2 * HOUR - 1, HOUR, oldest)  # retention + slack
    assert oldest.asked == 1
    oldest.at = 5 * HOUR  # finished at the first look, at the earliest
    assert trigger.due(7 * HOUR, HOUR, oldest)


def test_the_retention_trigger_is_off_for_infinite_retention_and_without_compaction() -> None:
    oldest = Oldest(0)
    assert not RetentionTrigger(CompactionPolicy()).due(10**12, None, oldest)
    assert not RetentionTrigger(CompactionPolicy(enabled=False)).due(10**12, HOUR, oldest)
    assert oldest.asked == 0


def test_the_retention_trigger_looks_again_under_another_retention() -> None:
    """An admin compaction may apply a shorter retention: the wait judged by the old one
    does not hold the new one back."""
    trigger = RetentionTrigger(CompactionPolicy())
    oldest = Oldest(0)
    assert not trigger.due(2 * HOUR, 24 * HOUR, oldest)  # due at 36 h under 24 h
    assert not trigger.due(2 * HOUR + 1, 24 * HOUR, oldest)
    assert oldest.asked == 1
    assert trigger.due(2 * HOUR + 1, HOUR, oldest)  # 1 h + its 1 h slack passed
    assert oldest.asked == 2


def test_the_dead_tail_trigger_needs_a_big_tail_of_little_retained_state() -> None:
    policy = CompactionPolicy()
    big = DEAD_TAIL_MIN_BYTES
    # the tail (history less the base) must reach the minimum ...
    assert not policy.dead_tail_due(big - 1, 0, 0)
    assert not policy.dead_tail_due(big + 1000, 1001, 0)
    assert policy.dead_tail_due(big, 0, 0)
    # ... and DEAD_TAIL_RATIO times the retained state's charge
    assert policy.dead_tail_due(big, 0, big // DEAD_TAIL_RATIO)
    assert not policy.dead_tail_due(big, 0, big // DEAD_TAIL_RATIO + 1)
    assert policy.dead_tail_due(4 * big + 5, 5, big // 2)
    assert not CompactionPolicy(enabled=False).dead_tail_due(big, 0, 0)
