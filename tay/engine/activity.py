"""What happened since this engine started: counters for metrics, a per-minute throughput
ring for the last hour (each minute that leaves it added to its UTC day's counts, which
``tay.engine.day_history`` records), the most recent failures, each queue's latency and
throughput per minute, and what each task did in the last hour.

All of it is volatile (a restart starts from zero) and fed only by live transitions, never
by replay, so a recovered store does not look like a burst of work. The cost per job event
is a few integer increments; nothing here is logged or formatted on the hot path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

MINUTE_MS = 60_000
DAY_MINUTES = 1_440
RING_MINUTES = 60
RECENT_FAILURES = 1_000
MESSAGE_PREVIEW_CHARS = 200
LATENCY_QUEUES_MAX = 256  # queues whose latency and throughput the hour keeps (more: not)
TASKS_FOLLOWED_MAX = 256  # (queue, task) pairs whose last hour TaskHour keeps (more: not)
# (queue, task) pairs counted one by one since start; the counts of pairs first seen after
# these many go to one row under OTHERS (an empty queue and task, never a real name: keys
# are 1..255 bytes), so queue or task names made up per job cannot grow the engine for life
PAIRS_MAX = 4_096
OTHERS = ""

# job outcome labels, one per job event that ends or starts a phase (docs/admin.md)
OUTCOMES = ("enqueued", "completed", "failed", "timed_out", "interrupted", "discarded",
            "cancelled", "retried")
FAILED_OUTCOMES = frozenset({"failed", "timed_out", "discarded"})
# outcome -> its column of the per-minute ring (enqueued, completed, failed); others: none
_COLUMNS = {"enqueued": 0, "completed": 1, **{outcome: 2 for outcome in FAILED_OUTCOMES}}
# outcome -> its place in a (queue, task)'s row of counts
_PLACES = {outcome: place for place, outcome in enumerate(OUTCOMES)}
# run time of each finished execution (start to finish as the engine recorded them), in ms:
# a histogram per (queue, task) after the outcome counts in its row, then the sum
RUN_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
                 300_000, 1_800_000)
_RUN_BASE = len(OUTCOMES)  # row[_RUN_BASE + k]: runs of at most RUN_BOUNDS_MS[k] (and more)
_RUN_SUM = _RUN_BASE + len(RUN_BOUNDS_MS) + 1
_ROW_LENGTH = _RUN_SUM + 1


class Activity:
    def __init__(self) -> None:
        # minute -> [enqueued, completed, failed]; only the last RING_MINUTES are kept
        self._minutes: dict[int, list[int]] = {}
        # the bucket of the minute counted last and its span [start, end) in ms: a count in
        # the same minute adds to it without the division and the ring lookup
        self._bucket: list[int] = [0, 0, 0]
        self._bucket_start = self._bucket_end = 0
        # the cached bucket left the ring when it was made (a minute older than the whole
        # ring): its counts go to its day when the cache moves on (_minute)
        self._bucket_dropped = False
        # UTC day -> [enqueued, completed, failed] of the minutes that left the ring
        self._days: dict[int, list[int]] = {}
        # queue -> task -> one count per outcome (OUTCOMES' order); ``jobs`` reads them as
        # (outcome, queue, task) -> n. Two subscripts, no key tuple.
        self._rows: dict[str, dict[str, list[int]]] = {}
        self.pairs = 0  # rows in _rows, the OTHERS row included
        self._others: dict[tuple[str, str, str], int] = {}  # an outcome not in OUTCOMES
        self.failures: deque[dict[str, Any]] = deque(maxlen=RECENT_FAILURES)
        self.unlogged: list[dict[str, Any]] = []  # failures the server has not logged yet
        # dispatch attempts a history cap refused, by cap (max_history_bytes / max_segments):
        # the job stays available; the server logs these (rate-limited) and exports them
        self.start_refusals: Counter[str] = Counter()

    @property
    def jobs(self) -> dict[tuple[str, str, str], int]:
        """(outcome, queue, task) -> n for every count above zero (a new dict each read)."""
        jobs = {}
        for queue, tasks in self._rows.items():
            for task, row in tasks.items():
                for outcome, n in zip(OUTCOMES, row):
                    if n:
                        jobs[(outcome, queue, task)] = n
        jobs.update(self._others)
        return jobs

    def enqueued(self, queue: str, task: str, at: int) -> None:
        """``count("enqueued", ...)`` without the routing (the enqueue's hot path)."""
        if self._bucket_start <= at < self._bucket_end:
            self._bucket[0] += 1
        else:
            self._minute(at)[0] += 1
        try:
            self._rows[queue][task][0] += 1
        except KeyError:
            self._row(queue, task)[0] += 1

    def completed(self, queue: str, task: str, at: int, run_ms: int) -> None:
        """``count("completed", ...)`` and ``ran(...)`` without the routing (the success's
        hot path)."""
        if self._bucket_start <= at < self._bucket_end:
            self._bucket[1] += 1
        else:
            self._minute(at)[1] += 1
        try:
            row = self._rows[queue][task]
        except KeyError:
            row = self._row(queue, task)
        row[1] += 1
        # ``_add_run(row, run_ms)``, inline (one call less per job)
        row[_RUN_BASE + bisect_left(RUN_BOUNDS_MS, run_ms)] += 1  # <= 0: the first bucket
        if run_ms > 0:
            row[_RUN_SUM] += run_ms

    def ran(self, queue: str, task: str, run_ms: int) -> None:
        """One execution's run time (a failure's, a time-out's: the finishes ``count``
        sees; a success's goes through ``completed``)."""
        try:
            _add_run(self._rows[queue][task], run_ms)
        except KeyError:
            _add_run(self._row(queue, task), run_ms)

    def count(self, outcome: str, queue: str, task: str, at: int) -> None:
        place = _PLACES.get(outcome)
        if place is None:
            key = (outcome, queue, task)
            if key not in self._others and len(self._others) >= PAIRS_MAX:
                key = (outcome, OTHERS, OTHERS)
            self._others[key] = self._others.get(key, 0) + 1
        else:
            try:
                self._rows[queue][task][place] += 1
            except KeyError:
                self._row(queue, task)[place] += 1
        column = _COLUMNS.get(outcome)
        if column is None:
            return
        if self._bucket_start <= at < self._bucket_end:
            self._bucket[column] += 1
        else:
            self._minute(at)[column] += 1

    def _row(self, queue: str, task: str) -> list[int]:
        tasks = self._rows.get(queue)
        row = tasks.get(task) if tasks is not None else None
        if row is not None:
            return row
        if self.pairs >= PAIRS_MAX:
            queue = task = OTHERS
            tasks = self._rows.get(OTHERS)
            row = tasks.get(OTHERS) if tasks is not None else None
            if row is not None:
                return row
        if tasks is None:
            tasks = self._rows[queue] = {}
        row = tasks[task] = [0] * _ROW_LENGTH
        self.pairs += 1
        return row

    def _minute(self, at: int) -> list[int]:
        """The ring's bucket of ``at``'s minute (made, trimming the oldest, if new), cached
        for the counts after it. A bucket the trim drops at once (a minute older than the
        whole ring) is cached too: the ring would drop each new one for that minute again,
        so counting into the dropped one shows the same."""
        if self._bucket_dropped:
            self._to_day(self._bucket_start // MINUTE_MS, self._bucket)
            self._bucket_dropped = False
        minute = at // MINUTE_MS
        bucket = self._minutes.get(minute)
        if bucket is None:
            bucket = self._minutes[minute] = [0, 0, 0]
            if len(self._minutes) > RING_MINUTES + 1:
                oldest = min(self._minutes)
                left = self._minutes.pop(oldest)
                if oldest == minute:  # counted into until the cache moves on
                    self._bucket_dropped = True
                else:
                    self._to_day(oldest, left)
        self._bucket = bucket
        self._bucket_start = start = minute * MINUTE_MS
        self._bucket_end = start + MINUTE_MS
        return bucket

    def _to_day(self, minute: int, counts: list[int]) -> None:
        day = self._days.get(minute // DAY_MINUTES)
        if day is None:
            self._days[minute // DAY_MINUTES] = list(counts)
        else:
            for column, n in enumerate(counts):
                day[column] += n

    def days(self) -> dict[int, list[int]]:
        """UTC day -> [enqueued, completed, failed] counted since start (a new dict)."""
        days = {day: list(counts) for day, counts in self._days.items()}
        minutes = list(self._minutes.items())
        if self._bucket_dropped:
            minutes.append((self._bucket_start // MINUTE_MS, self._bucket))
        for minute, counts in minutes:
            day = days.setdefault(minute // DAY_MINUTES, [0, 0, 0])
            for column, n in enumerate(counts):
                day[column] += n
        return days

    def failure(self, at: int, job_id: bytes, queue: str, task: str, attempt: int,
                outcome: str, error: dict[str, str] | None) -> None:
        """Remember one failure (the error text is cut to a preview)."""
        message = (error or {}).get("message")
        item = {
            "at": at, "job_id": job_id.hex(), "queue": queue, "task": task, "attempt": attempt,
            "outcome": outcome, "error_type": (error or {}).get("type"),
            "message": message[:MESSAGE_PREVIEW_CHARS] if message is not None else None,
        }
        self.failures.append(item)
        if len(self.unlogged) < RECENT_FAILURES:  # bounded if nobody takes them
            self.unlogged.append(item)

    def take_unlogged(self) -> list[dict[str, Any]]:
        taken, self.unlogged = self.unlogged, []
        return taken

    def per_minute(self, now_ms: int) -> list[dict[str, int]]:
        """The last RING_MINUTES whole and current minutes, oldest first (zeros included)."""
        current = now_ms // MINUTE_MS
        rows = []
        for minute in range(current - RING_MINUTES + 1, current + 1):
            enqueued, completed, failed = self._minutes.get(minute, (0, 0, 0))
            rows.append({"minute": minute * MINUTE_MS, "enqueued": enqueued,
                         "completed": completed, "failed": failed})
        return rows

    def rows(self) -> list[tuple[str, str, list[int]]]:
        """(queue, task, its row: the counts by outcome, the run-time histogram and sum)
        per (queue, task) counted since start; the rows themselves, not copies."""
        return [(queue, task, row) for queue, tasks in self._rows.items()
                for task, row in tasks.items()]

    def runs(self) -> list[tuple[str, str, list[int], list[int], int]]:
        """(queue, task, counts by outcome (OUTCOMES' order), run-time histogram (one count
        per RUN_BOUNDS_MS bound, then the longer ones), run-time sum in ms) per (queue,
        task) counted since start."""
        return [(queue, task, row[:_RUN_BASE], row[_RUN_BASE:_RUN_SUM], row[_RUN_SUM])
                for queue, tasks in self._rows.items() for task, row in tasks.items()]

    def queue_totals(self) -> list[tuple[str, int, int]]:
        """(queue, completed, failed) counted since start (failed as the ring counts it:
        failed, timed out and discarded), what ``QueueThroughput`` samples."""
        failed_places = [_PLACES[outcome] for outcome in FAILED_OUTCOMES]
        totals = []
        for queue, tasks in self._rows.items():
            if queue == OTHERS:  # not a queue: the hour's rings are per real queue
                continue
            completed = failed = 0
            for row in tasks.values():
                completed += row[1]
                for place in failed_places:
                    failed += row[place]
            totals.append((queue, completed, failed))
        return totals

    def recent_failures(self, since_ms: int, limit: int) -> list[dict[str, Any]]:
        """Failures at or after ``since_ms``, newest first, at most ``limit``."""
        found = []
        for item in reversed(self.failures):
            if item["at"] < since_ms or len(found) >= limit:
                break
            found.append(item)
        return found


def _add_run(row: list[int], run_ms: int) -> None:
    row[_RUN_BASE + bisect_left(RUN_BOUNDS_MS, run_ms)] += 1  # <= 0: the first bucket
    if run_ms > 0:
        row[_RUN_SUM] += run_ms


class _MinuteRings:
    """Per-queue (or per-key) rings of the last RING_MINUTES minutes (minute -> value),
    trimmed once per minute that a sample starts."""

    def __init__(self) -> None:
        self._rings: dict[Any, dict[int, Any]] = {}  # queue (or key) -> minute -> value
        self._trimmed = 0  # the minute the rings were last trimmed in

    def _minute(self, now_ms: int) -> int:
        """``now_ms``'s minute, the rings trimmed to the hour that ends in it."""
        minute = now_ms // MINUTE_MS
        if minute != self._trimmed:
            floor = minute - RING_MINUTES + 1
            for key in list(self._rings):
                ring = self._rings[key]
                for old in [m for m in ring if m < floor]:
                    del ring[old]
                if not ring:
                    del self._rings[key]
            self._trimmed = minute
        return minute

    @staticmethod
    def _hour(now_ms: int) -> range:
        """The minutes of the hour that ends in ``now_ms``'s, oldest first."""
        current = now_ms // MINUTE_MS
        return range(current - RING_MINUTES + 1, current + 1)


class QueueLatency(_MinuteRings):
    """How long each queue's oldest ready job had waited, at most, in each minute of the
    last hour: the queue latency's history, for a chart (docs/admin.md, ``activity``).

    Sampled, not fed by job events: a queue whose jobs wait because nothing dispatches
    them (no worker, paused, too few credits) has no events, and that is when its
    latency matters. The server samples every few seconds and each ``activity`` read
    samples once more, so the current minute is up to date. Only queues with a job
    ready and waiting are recorded; a minute without a sample reads 0.
    """

    def sample(self, now_ms: int, latencies: Iterable[tuple[str, int]]) -> None:
        """``latencies``: (queue, ms its oldest ready job has waited) at ``now_ms``."""
        minute = self._minute(now_ms)
        queues = self._rings  # queue -> minute -> the largest latency sampled, ms
        for queue, latency in latencies:
            ring = queues.get(queue)
            if ring is None:
                if len(queues) >= LATENCY_QUEUES_MAX:
                    continue
                ring = queues[queue] = {}
            if latency > ring.get(minute, 0):
                ring[minute] = latency

    def per_minute(self, now_ms: int, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` queues, the highest peak in the hour first: ``{queue, peak_ms,
        per_minute}`` with one value per minute, oldest first (as ``Activity.per_minute``)."""
        minutes = self._hour(now_ms)
        series = []
        for queue, ring in self._rings.items():
            values = [ring.get(minute, 0) for minute in minutes]
            peak = max(values)
            if peak:
                series.append({"queue": queue, "peak_ms": peak, "per_minute": values})
        series.sort(key=lambda row: (-row["peak_ms"], row["queue"]))
        return series[:limit]


class QueueThroughput(_MinuteRings):
    """How many jobs of each queue completed and failed in each minute of the last hour:
    the per-queue split of ``Activity.per_minute``, for a chart (docs/admin.md,
    ``activity``).

    Sampled from ``Activity``'s counts since start, not fed by job events, so the job
    path pays nothing for it: each sample adds what a queue counted since the previous one
    to the sample's minute (the server samples every few seconds, so a count can land in
    the minute after the one it happened in). At most ``LATENCY_QUEUES_MAX`` queues are
    followed, the first ones seen.
    """

    def __init__(self) -> None:
        super().__init__()  # its rings: queue -> minute -> [completed, failed]
        self._last: dict[str, tuple[int, int]] = {}  # queue -> (completed, failed) so far

    def sample(self, now_ms: int, totals: Iterable[tuple[str, int, int]]) -> None:
        """``totals``: (queue, completed, failed) counted since start, at ``now_ms``."""
        minute = self._minute(now_ms)
        last, queues = self._last, self._rings
        for queue, completed, failed in totals:
            before = last.get(queue)
            if before is None:
                if len(last) >= LATENCY_QUEUES_MAX:
                    continue
                before = (0, 0)
            if (completed, failed) == before:
                continue
            last[queue] = (completed, failed)
            ring = queues.get(queue)
            if ring is None:
                ring = queues[queue] = {}
            bucket = ring.get(minute)
            if bucket is None:
                bucket = ring[minute] = [0, 0]
            bucket[0] += completed - before[0]
            bucket[1] += failed - before[1]

    def per_minute(self, now_ms: int, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` queues, the most jobs finished in the hour first: ``{queue,
        completed, failed, completed_per_minute, failed_per_minute}``, one value per
        minute, oldest first (as ``Activity.per_minute``)."""
        minutes = self._hour(now_ms)
        series = []
        for queue, ring in self._rings.items():
            completed = [ring[m][0] if m in ring else 0 for m in minutes]
            failed = [ring[m][1] if m in ring else 0 for m in minutes]
            done, lost = sum(completed), sum(failed)
            if done or lost:
                series.append({"queue": queue, "completed": done, "failed": lost,
                               "completed_per_minute": completed, "failed_per_minute": failed})
        series.sort(key=lambda row: (-row["completed"] - row["failed"], row["queue"]))
        return series[:limit]


class TaskHour(_MinuteRings):
    """What each (queue, task) did in each minute of the last hour: ``Activity.runs``'s
    counts by outcome and run-time histogram, windowed (docs/admin.md, ``tasks`` with
    ``window: hour``), so a task that got slow or started failing a few minutes ago shows
    it, where the counts since start hide it.

    Sampled from ``Activity``'s rows like ``QueueThroughput``: each sample adds what a row
    counted since the previous one to the sample's minute, so the job path pays nothing.
    A minute holds rows only for the pairs that changed in it. At most
    ``TASKS_FOLLOWED_MAX`` pairs are followed, the first ones seen.
    """

    def __init__(self) -> None:
        super().__init__()  # its rings: (queue, task) -> minute -> row of what changed
        self._last: dict[tuple[str, str], list[int]] = {}  # (queue, task) -> row so far

    def sample(self, now_ms: int, rows: Iterable[tuple[str, str, list[int]]]) -> None:
        """``rows``: ``Activity.rows()`` at ``now_ms``."""
        minute = self._minute(now_ms)
        last, rings = self._last, self._rings
        for queue, task, row in rows:
            key = (queue, task)
            before = last.get(key)
            if before is None:
                if len(last) >= TASKS_FOLLOWED_MAX:
                    continue
                before = [0] * _ROW_LENGTH
            elif row == before:
                continue
            last[key] = row[:]
            ring = rings.get(key)
            if ring is None:
                ring = rings[key] = {}
            bucket = ring.get(minute)
            if bucket is None:
                ring[minute] = [now - then for now, then in zip(row, before)]
            else:
                for place, (now, then) in enumerate(zip(row, before)):
                    bucket[place] += now - then

    def runs(self, now_ms: int) -> list[tuple[str, str, list[int], list[int], int]]:
        """``Activity.runs()``'s shape for the hour that ends in ``now_ms``'s minute: the
        pairs that counted anything in it."""
        floor = now_ms // MINUTE_MS - RING_MINUTES + 1
        out = []
        for (queue, task), ring in self._rings.items():
            total = [0] * _ROW_LENGTH
            for minute, bucket in ring.items():
                if minute >= floor:
                    for place, n in enumerate(bucket):
                        total[place] += n
            if any(total):
                out.append((queue, task, total[:_RUN_BASE], total[_RUN_BASE:_RUN_SUM],
                            total[_RUN_SUM]))
        return out
