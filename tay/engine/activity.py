"""What happened since this engine started: counters for metrics, a per-minute throughput
ring for the last hour, and the most recent failures.

All of it is volatile (a restart starts from zero) and fed only by live transitions, never
by replay, so a recovered store does not look like a burst of work. The cost per job event
is a few integer increments; nothing here is logged or formatted on the hot path.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

MINUTE_MS = 60_000
RING_MINUTES = 60
RECENT_FAILURES = 1_000
MESSAGE_PREVIEW_CHARS = 200

# job outcome labels, one per job event that ends or starts a phase (docs/admin.md)
OUTCOMES = ("enqueued", "completed", "failed", "timed_out", "interrupted", "discarded",
            "cancelled", "retried")
FAILED_OUTCOMES = frozenset({"failed", "timed_out", "discarded"})
# outcome -> its column of the per-minute ring (enqueued, completed, failed); others: none
_COLUMNS = {"enqueued": 0, "completed": 1, **{outcome: 2 for outcome in FAILED_OUTCOMES}}


class Activity:
    def __init__(self) -> None:
        # minute -> [enqueued, completed, failed]; only the last RING_MINUTES are kept
        self._minutes: dict[int, list[int]] = {}
        # (outcome, queue, task) -> n; a plain dict: a Counter's item update costs about
        # twice a dict's (no specialised subscript for a subclass)
        self.jobs: dict[tuple[str, str, str], int] = {}
        self.failures: deque[dict[str, Any]] = deque(maxlen=RECENT_FAILURES)
        self.unlogged: list[dict[str, Any]] = []  # failures the server has not logged yet
        # dispatch attempts a history cap refused, by cap (max_history_bytes / max_segments):
        # the job stays available; the server logs these (rate-limited) and exports them
        self.start_refusals: Counter[str] = Counter()

    def count(self, outcome: str, queue: str, task: str, at: int) -> None:
        jobs, key = self.jobs, (outcome, queue, task)
        jobs[key] = jobs.get(key, 0) + 1
        column = _COLUMNS.get(outcome)
        if column is None:
            return
        minute = at // MINUTE_MS
        bucket = self._minutes.get(minute)
        if bucket is None:
            bucket = self._minutes[minute] = [0, 0, 0]
            if len(self._minutes) > RING_MINUTES + 1:
                del self._minutes[min(self._minutes)]
        bucket[column] += 1

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

    def recent_failures(self, since_ms: int, limit: int) -> list[dict[str, Any]]:
        """Failures at or after ``since_ms``, newest first, at most ``limit``."""
        found = []
        for item in reversed(self.failures):
            if item["at"] < since_ms or len(found) >= limit:
                break
            found.append(item)
        return found
