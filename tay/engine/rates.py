"""Queue rate limits (``limit_queue``, durable as (28,2) ``queue_rate_limited``): at most
``starts`` job starts of a queue in any ``period_ms``, however many credits and executors
are free (Oban's and Sidekiq Enterprise's rate limits, for a queue that calls an API with a
quota).

The limit is durable; what it counts is not. Each limited queue keeps a sliding log of its
starts' monotonic times, at most ``starts`` long (RATE_STARTS_MAX bounds it), and a period
made longer counts only the starts the log still holds (those of the shorter one). After a
restart the log is seeded (``seed``) from the start times its retained jobs recorded in
the period (``EngineState.seed_rate_logs``): the newest jobs of the queue, at most a bounded
number of them, so a start of a job no longer retained, or beyond that bound, is not seen
and the first period may start that many more. A queue that the log holds back sets
``wake``: the engine's next tick, when enough of its starts have left the period.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class RateLimits:
    def __init__(self) -> None:
        self.limits: dict[str, tuple[int, int]] = {}  # queue -> (starts, period_ms)
        self._logs: dict[str, deque[int]] = {}  # queue -> its starts in the period, oldest first
        # the earliest monotonic time a held queue may start again, as the last dispatch
        # found it (None: none was held back); reset by each dispatch
        self.wake: int | None = None

    def __bool__(self) -> bool:
        return bool(self.limits)

    def __contains__(self, queue: object) -> bool:
        return queue in self.limits

    def set(self, queue: str, starts: int | None, period_ms: int | None) -> None:
        """The queue's limit from now on; None: none. Its log stays (a lowered limit holds
        the queue until enough of its recent starts leave the new period)."""
        if starts is None or period_ms is None:
            self.limits.pop(queue, None)
            self._logs.pop(queue, None)
            if not self.limits:
                self.wake = None  # no dispatch looks at it any more
        else:
            self.limits[queue] = (starts, period_ms)

    def allows(self, queue: str, mono_ms: int) -> bool:
        """Whether a limited queue may start a job at ``mono_ms``; when not, ``wake`` is
        brought forward to when it may."""
        log = self._logs.get(queue)
        if not log:
            return True
        starts, period_ms = self.limits[queue]
        floor = mono_ms - period_ms
        while log and log[0] <= floor:
            log.popleft()
        free_at = _free_at(log, starts, period_ms)
        if free_at is None:
            return True
        if self.wake is None or free_at < self.wake:
            self.wake = free_at
        return False

    def started(self, queue: str, mono_ms: int) -> None:
        """A limited queue started a job at ``mono_ms``."""
        log = self._logs.get(queue)
        if log is None:
            log = self._logs[queue] = deque()
        log.append(mono_ms)

    def seed(self, queue: str, times: Sequence[int]) -> None:
        """A limited queue's log from ``times`` (monotonic, any order), the newest
        ``starts`` of them: its recent starts as recovery found them."""
        starts = self.limits[queue][0]
        self._logs[queue] = deque(sorted(times)[-starts:])

    def held_until(self, queue: str, mono_ms: int) -> int | None:
        """When a limited queue may start again if it is held back at ``mono_ms`` (its log
        full), else None. A read: ``wake`` does not move."""
        limit = self.limits.get(queue)
        log = self._logs.get(queue)
        if limit is None or not log:
            return None
        starts, period_ms = limit
        return _free_at([at for at in log if at > mono_ms - period_ms], starts, period_ms)


def _free_at(recent: Sequence[int], starts: int, period_ms: int) -> int | None:
    """When a queue whose ``recent`` starts (oldest first, all in the period) may start
    again; None: now. Free once all but ``starts - 1`` of them left the period (a lowered
    limit's log is longer than its new ``starts``)."""
    if len(recent) < starts:
        return None
    return recent[len(recent) - starts] + period_ms
