"""History caps with a finishing reserve (upstream-features §1.3 "History caps", style.md 7).

``max_history_bytes`` caps the bytes of all segment files (headers, frames, footers) and
``max_segments`` the number of segment files; both default to unlimited. Every active
execution holds a reserve of ``RESERVE_BYTES_PER_EXECUTION`` (1,132 = a 1,024-byte finishing
frame + one segment's header and footer) and one segment coordinate, so that its finishing
record can always be written. Only *admissions* (inserts and starts) are checked against
the caps, before any I/O; every other record (finish, cancel, retry, ...) is accounted but
never refused, so a job can always finish even when the caps are reached.

``HistoryBudget`` mirrors the journal's layout exactly: it applies the journal's own
rotation rule (``journal.rotation_needed``) to every frame the engine emits, so its view
of bytes and segments equals what the writer will produce. The engine owns one budget:

    budget = HistoryBudget.for_journal(journal, HistoryCaps(max_history_bytes=...))
    budget.admit(frame_sizes, active_executions_after)   # insert/start: may refuse
    budget.account(frame_sizes)                          # any other event: never refuses
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tay.failures import ConfigurationError, RequestRefused
from tay.storage.journal.writer import Journal, rotation_needed
from tay.storage.formats.record import FIXED_SIZE as RECORD_OVERHEAD
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE

RESERVE_BYTES_PER_EXECUTION = 1_132


def frame_size(payload_length: int) -> int:
    """Bytes a record with a payload of ``payload_length`` bytes occupies on disk."""
    return RECORD_OVERHEAD + payload_length


@dataclass(frozen=True)
class HistoryCaps:
    """The two optional caps; None means unlimited."""

    max_history_bytes: int | None = None
    max_segments: int | None = None

    def __post_init__(self) -> None:
        for option in ("max_history_bytes", "max_segments"):
            value = getattr(self, option)
            if value is not None and (type(value) is not int or value < 1):
                raise ConfigurationError(option, f"must be a positive integer or unset, got {value!r}")


@dataclass
class _Layout:
    """Where the journal will be after the frames accounted so far."""

    history_bytes: int
    segments: int
    active_size: int

    def add(self, size: int, rotation_target: int) -> None:
        if rotation_needed(self.active_size, size, rotation_target):
            self.history_bytes += FOOTER_SIZE + HEADER_SIZE
            self.segments += 1
            self.active_size = HEADER_SIZE
        self.active_size += size
        self.history_bytes += size


class HistoryBudget:
    """The engine-side projection of history size against ``HistoryCaps``."""

    def __init__(self, caps: HistoryCaps, rotation_target: int, *, history_bytes: int,
                 segments: int, active_size: int) -> None:
        self.caps = caps
        self.rotation_target = rotation_target
        self.layout = _Layout(history_bytes, segments, active_size)

    @classmethod
    def for_journal(cls, journal: Journal, caps: HistoryCaps) -> "HistoryBudget":
        """A budget positioned at the journal's current tail (call right after recovery)."""
        return cls(caps, journal.rotation_target, history_bytes=journal.history_bytes,
                   segments=journal.segment_id, active_size=journal.size)

    @property
    def history_bytes(self) -> int:
        return self.layout.history_bytes

    @property
    def segments(self) -> int:
        return self.layout.segments

    def account(self, frame_sizes: Iterable[int]) -> None:
        """Record frames the engine emitted that are not admissions. Never refuses."""
        for size in frame_sizes:
            self.layout.add(size, self.rotation_target)

    def admit(self, frame_sizes: Iterable[int], active_executions: int) -> None:
        """Check then account the frames of an insert or start.

        ``active_executions`` is the number of executions running once these frames are
        applied (a start counts itself). Refuses with ``RequestRefused`` code ``capacity``
        and reason ``max_history_bytes`` or ``max_segments`` when the frames plus the
        reserve of every active execution would pass a cap; nothing is accounted then.
        """
        projected = _Layout(**vars(self.layout))
        for size in frame_sizes:
            projected.add(size, self.rotation_target)
        reserve_bytes = active_executions * RESERVE_BYTES_PER_EXECUTION
        caps = self.caps
        if caps.max_history_bytes is not None and projected.history_bytes + reserve_bytes > caps.max_history_bytes:
            raise RequestRefused(
                f"history would reach {projected.history_bytes} bytes plus a {reserve_bytes}-byte "
                f"finishing reserve, over max_history_bytes {caps.max_history_bytes}",
                code="capacity", reason="max_history_bytes")
        if caps.max_segments is not None and projected.segments + active_executions > caps.max_segments:
            raise RequestRefused(
                f"history would reach {projected.segments} segments plus {active_executions} "
                f"reserved, over max_segments {caps.max_segments}",
                code="capacity", reason="max_segments")
        self.layout = projected
