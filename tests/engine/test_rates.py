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


@pytest.mark.parametrize("store", ["v1", "v2"])
def test_a_restart_counts_the_starts_its_jobs_recorded_in_the_period(store):
    """Two of 2/60 s started (one retried after a failure: three starts), then a replay
    into a fresh engine: ten seconds on, the queue is still held, until a minute after the
    second-newest start; with no limit the same replay starts at once."""
    from tay.engine import Execute, Engine, EngineConfig
    from tay.engine import commands as c
    from tests.engine.conftest import M0, T0, Driver, reply
    from tests.engine.test_engine_epoch import replay_tail
    from tests.engine.test_fused_commits import epoch_driver

    driver = Driver() if store == "v1" else epoch_driver(1, "none", True)
    reply(driver.run(c.Admin("p", "l", "limit_queue",
                             {"queue": "q", "starts": 3, "period_ms": 60_000})))
    driver.worker(tasks=("t",), capacity=5)
    (first,) = [e for e in driver.enqueue(task="t", queue="q", retries=1).effects
                if isinstance(e, Execute)]
    driver.fail(first)  # retryable: its retry starts again after a backoff
    driver.advance(5_000)
    (retry,) = [e for e in driver.tick().effects if isinstance(e, Execute)]
    driver.succeed(retry)
    driver.advance(1_000)
    (second,) = [e for e in driver.enqueue(task="t", queue="q").effects
                 if isinstance(e, Execute)]
    driver.succeed(second)
    starts = [T0, T0 + 5_000, T0 + 6_000]

    def restarted(at: int):
        if store == "v1":
            fresh = Driver()
            for sequence, event in driver.journal:
                fresh.engine.consume_event(sequence, event)
        else:
            fresh = replay_tail(driver.journal)
        fresh.now, fresh.mono = at, M0 + 10**7  # a new process: another monotonic origin
        fresh.engine.finish_recovery(fresh.now, fresh.mono)
        fresh.worker(tasks=("t",), capacity=5)
        return fresh

    fresh = restarted(T0 + 16_000)
    # explicit ids: the fresh driver's random ids would repeat the first run's
    waiting = fresh.enqueue(task="t", queue="q", id="ab" * 16)
    reply(waiting)
    assert not [e for e in waiting.effects if isinstance(e, Execute)]
    held = reply(fresh.run(c.Admin("p", "q", "queues", {}))).fields["queues"]
    (limited,) = [q for q in held if q["name"] == "q"]
    assert limited["rate_limited_until"] == starts[0] + 60_000
    fresh.advance(starts[0] + 60_000 - fresh.now)
    assert [e for e in fresh.tick().effects if isinstance(e, Execute)]
    later = restarted(T0 + 61_000)  # the first start left the period: one start is free
    assert [e for e in later.enqueue(task="t", queue="q", id="cd" * 16).effects
            if isinstance(e, Execute)]
