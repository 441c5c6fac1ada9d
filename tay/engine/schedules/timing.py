"""When occurrences fall due: first occurrence, advancement rules and occurrence job ids.

Pure functions of a schedule definition and instants (Unix ms); no state, no clock.

* First occurrence: ``every`` -> exactly the start instant; ``cron`` -> the first matching
  minute at or after the start of the minute containing the start instant.
* After delivering ``due`` at ``now``: ``catch_up=all`` -> the occurrence right after ``due``
  (missed ones follow back to back); ``catch_up=latest`` -> the first occurrence after
  ``max(due, now)`` (later missed times are coalesced).
* Skipping (overlap ``skip`` while an earlier occurrence is busy) always moves to the first
  occurrence after ``now``: every occurrence up to now would meet the same busy job.

None means "no further occurrence" (cron search limit reached, or past the largest time).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from tay._frozen import Frozen, set_field
from tay.engine.schedules.cron import (
    CronSpec, first_at_or_after_minute, next_after, parse_cron, parse_timezone,
)

TIME_MAX = 2**63 - 1
OCCURRENCE_PREFIX = b"tay-schedule-occurrence-v1:"


def occurrence_job_id(schedule_id: str, due_at: int) -> bytes:
    """First 16 bytes of SHA-256("tay-schedule-occurrence-v1:" id ":" due); zero -> 0..01."""
    material = OCCURRENCE_PREFIX + schedule_id.encode("utf-8") + b":" + str(due_at).encode("ascii")
    digest = hashlib.sha256(material).digest()[:16]
    return digest if digest != bytes(16) else bytes(15) + b"\x01"


def _bounded(instant: int) -> int | None:
    return instant if instant <= TIME_MAX else None


class Timing(Frozen):
    """The occurrence sequence of one definition: an interval or a cron spec with an offset."""

    __slots__ = ("interval_ms", "cron", "offset_minutes", "catch_up")
    interval_ms: int | None
    cron: CronSpec | None
    offset_minutes: int
    catch_up: str

    def __init__(self, interval_ms: int | None, cron: CronSpec | None, offset_minutes: int,
                 catch_up: str) -> None:
        set_field(self, "interval_ms", interval_ms)
        set_field(self, "cron", cron)
        set_field(self, "offset_minutes", offset_minutes)
        set_field(self, "catch_up", catch_up)

    @classmethod
    def of(cls, definition: Mapping[str, Any]) -> "Timing":
        """Build from a definition map; raises ``RequestRefused(invalid_schedule)`` if bad."""
        if definition["kind"] == "every":
            return cls(definition["expression"], None, 0, definition["catch_up"])
        zone = definition["timezone"]
        offset = parse_timezone("+00" if zone is None else zone)
        return cls(None, parse_cron(definition["expression"]), offset, definition["catch_up"])

    def first_due(self, start_ms: int) -> int | None:
        if self.cron is None:
            return start_ms
        return first_at_or_after_minute(self.cron, self.offset_minutes, start_ms)

    def following(self, due: int) -> int | None:
        """The occurrence right after ``due``."""
        if self.cron is None:
            return _bounded(due + self.interval_ms)
        return next_after(self.cron, self.offset_minutes, due)

    def first_after(self, due: int, now: int) -> int | None:
        """The first occurrence of ``due``'s sequence strictly after ``max(due, now)``."""
        if self.cron is None:
            elapsed = max(0, now - due)
            return _bounded(due + (elapsed // self.interval_ms + 1) * self.interval_ms)
        return next_after(self.cron, self.offset_minutes, max(due, now))

    def after_delivery(self, due: int, now: int) -> int | None:
        if self.catch_up == "all":
            return self.following(due)
        return self.first_after(due, now)
