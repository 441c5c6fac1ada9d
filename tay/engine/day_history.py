"""What each UTC day saw, across restarts: jobs enqueued, executions that completed and
executions that failed (failed, timed out or discarded), as Sidekiq's processed/failed
history shows them.

The live counts are the activity's (``Activity.days``: volatile, since start). The server
records each day whose counts moved as a (32,2) ``day_totals`` event every
``RECORD_EVERY_MS`` and at a clean stop, carrying the day's whole totals, so a replay
takes the last one of each day and a base checkpoints it (one entity per day, 141
bytes). A day's totals are then what it recorded plus what this life counted since its
last record. A kill -9 loses what was counted since the last record (at most a minute of
counts); the jobs themselves are in the journal as ever.
"""

from __future__ import annotations

from typing import Any

from tay.storage.events.operations import DAY_MS, day_totals
from tay.storage.events.registry import Event

RECORD_EVERY_MS = 60_000  # how often the server records the days that moved
_ZERO = (0, 0, 0)


class DayHistory:
    def __init__(self) -> None:
        # day -> (enqueued, completed, failed) of its last (32,2)
        self.recorded: dict[int, tuple[int, int, int]] = {}
        # day -> the live counts (Activity.days) that record already held: zeros for a
        # replayed one, this life's counts for one written live
        self._held: dict[int, tuple[int, int, int]] = {}

    def apply(self, event: Event, live: list[int] | None) -> None:
        """A (32,2), live or replayed (``live``: the activity's counts of its day now)."""
        day = event["day"]
        self.recorded[day] = (event["enqueued"], event["completed"], event["failed"])
        self._held[day] = _ZERO if live is None else tuple(live)

    def totals(self, live: dict[int, list[int]]) -> dict[int, tuple[int, int, int]]:
        """Every day with a count: its totals, durable and since the last record."""
        out = {}
        for day in self.recorded.keys() | live.keys():
            recorded = self.recorded.get(day, _ZERO)
            held = self._held.get(day, _ZERO)
            now = live.get(day, _ZERO)
            out[day] = (recorded[0] + now[0] - held[0], recorded[1] + now[1] - held[1],
                        recorded[2] + now[2] - held[2])
        return out

    def unrecorded(self, live: dict[int, list[int]], now_ms: int) -> list[Event]:
        """A (32,2) for each day this life counted more of since its last record."""
        events = []
        for day in sorted(live):
            counts = tuple(live[day])
            if counts == self._held.get(day, _ZERO):
                continue
            recorded = self.recorded.get(day, _ZERO)
            held = self._held.get(day, _ZERO)
            events.append(day_totals(day, *(r + n - h for r, n, h in
                                             zip(recorded, counts, held)), at=now_ms))
        return events

    def checkpoints(self, at: int) -> dict[int, Event]:
        """Each recorded day's last (32,2), for a base (``at``: the capture's time)."""
        return {day: day_totals(day, *counts, at=at) for day, counts in self.recorded.items()}


def last_days(totals: dict[int, tuple[int, int, int]], today: int,
              days: int) -> list[dict[str, Any]]:
    """The ``days`` UTC days up to ``today``, oldest first, zeros where none was counted."""
    rows = []
    for day in range(today - days + 1, today + 1):
        enqueued, completed, failed = totals.get(day, _ZERO)
        rows.append({"day": day * DAY_MS, "enqueued": enqueued, "completed": completed,
                     "failed": failed})
    return rows
