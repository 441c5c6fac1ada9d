"""Queue rate limits (tay.engine.rates) against the rule written plainly: a start is allowed
when fewer than ``starts`` of the queue's starts lie in the ``period_ms`` that ends now
(exactly so while the period does not grow: a longer one does not count starts that had
left the shorter one before)."""

from __future__ import annotations

import random

import pytest

from tay.engine.rates import RateLimits


@pytest.mark.parametrize("seed", range(20))
def test_the_sliding_log_allows_exactly_what_the_rule_allows(seed):
    rng = random.Random(seed)
    rates = RateLimits()
    starts, period = rng.randint(1, 5), rng.choice((1, 10, 100, 1_000))
    rates.set("q", starts, period)
    history: list[int] = []
    now = 0
    for _ in range(400):
        now += rng.choice((0, 1, 3, period // 4 or 1, period))
        if rng.random() < 0.05:  # the operator moves the limit (the period no longer)
            starts = rng.randint(1, 5)
            period = rng.choice([p for p in (1, 10, 100, 1_000) if p <= period])
            rates.set("q", starts, period)
        recent = [at for at in history if at > now - period]
        expected = len(recent) < starts
        rates.wake = None
        assert rates.allows("q", now) is expected
        if expected:
            assert rates.held_until("q", now) is None and rates.wake is None
            if rng.random() < 0.8:
                rates.started("q", now)
                history.append(now)
        else:
            # free when all but starts - 1 of the recent ones left the period
            free_at = sorted(recent)[len(recent) - starts] + period
            assert rates.wake == free_at == rates.held_until("q", now)
            assert free_at > now
            later = [at for at in history if at > free_at - period]
            assert len(later) < starts  # and it is free then


def test_a_longer_period_counts_the_starts_the_log_still_holds():
    rates = RateLimits()
    rates.set("q", 1, 10)
    rates.started("q", 0)
    assert rates.allows("q", 10)  # the start at 0 left the 10 ms period: forgotten
    rates.started("q", 10)
    rates.set("q", 1, 1_000)
    assert not rates.allows("q", 500) and rates.wake == 1_010  # 10 counts, 0 no longer


def test_lifting_the_last_limit_forgets_the_wake():
    rates = RateLimits()
    rates.set("q", 1, 1_000)
    rates.started("q", 5)
    assert not rates.allows("q", 6) and rates.wake == 1_005
    rates.set("q", None, None)
    assert not rates and rates.wake is None and "q" not in rates
