"""History caps with a finishing reserve (upstream-features §1.3 "History caps", style.md 7).

``max_history_bytes`` caps the bytes of all segment files (headers, frames, footers) and
``max_segments`` the number of segment files; both default to unlimited. The caps are hard:
the segments never pass them.

Every active execution holds a reserve so that it can always finish: its finishing frame
(at most ``FINISH_FRAME_BYTES``), then the larger of the (10,2) frame of its result at the
executor result limit (``result_frame_bytes``) and the (22,2) frame of its failure details
at the error limit (``failure_frame_bytes``) (upstream keeps neither and reserves 1,132
bytes; tay stores both), and the header and footer of the segment a rotation may open,
one coordinate per rotation. Only the records that end an execution (finish, result or
failure details, the cancel of a running job) are *accounted* against that reserve and
never refused; every other record (inserts, starts, cancels of waiting jobs, availability,
retries, queue pauses, schedule events) is an *admission*, checked against the caps plus
every active reserve before any I/O.

``HistoryBudget`` mirrors the journal's layout exactly: it applies the journal's own
rotation rule (``journal.rotation_needed``) to every frame the engine emits, so its view
of bytes and segments equals what the writer will produce. The engine owns one budget:

    budget = HistoryBudget.for_journal(journal, HistoryCaps(max_history_bytes=...))
    budget.admit(frame_sizes, active_executions_after)   # an admission: may refuse
    budget.account(frame_sizes)                          # the end of an execution: never refuses
"""

from __future__ import annotations

from typing import Iterable

from tay._frozen import Frozen, Record, replace, set_field
from tay.failures import ConfigurationError, RequestRefused
from tay.storage.journal.writer import Journal, rotation_needed
from tay.storage.formats.record import FIXED_SIZE as RECORD_OVERHEAD
from tay.storage.formats.record import MAX_PAYLOAD
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE

FINISH_FRAME_BYTES = 1_024  # the largest job_finished / job_cancelled frame (about 300 today)
# A (10,2) payload is a 4-key map (at, expected_revision, job_id, result) around the result
# Value, (22,2) the same around the error map: with a 16-byte job id and fixed-width
# integers, this many bytes besides that Value.
RESULT_PAYLOAD_OVERHEAD = 95
FAILURE_PAYLOAD_OVERHEAD = 94
# Inside a Store-v2 epoch a tail event is carried in a (30,2) epoch_event (10 more bytes:
# inner type, schema, revision u64) and a base keeps a result in a (31,2) attachment (2).
EPOCH_CARRY_BYTES = 10
# The largest result / error Value one record can hold, carried or not (a payload is at
# most MAX_PAYLOAD, 16 MiB): a result limit above ~3.7 MB admits JSON whose Value is larger.
MAX_RESULT_VALUE_BYTES = MAX_PAYLOAD - EPOCH_CARRY_BYTES - RESULT_PAYLOAD_OVERHEAD
MAX_FAILURE_VALUE_BYTES = MAX_PAYLOAD - EPOCH_CARRY_BYTES - FAILURE_PAYLOAD_OVERHEAD
DEFAULT_RESULT_BYTES = 65_536  # executor_result_bytes (protocol.md Appendix B)
DEFAULT_ERROR_BYTES = 8_192  # executor_error_bytes


def frame_size(payload_length: int) -> int:
    """Bytes a record with a payload of ``payload_length`` bytes occupies on disk."""
    return RECORD_OVERHEAD + payload_length


def json_value_bytes(json_bytes: int) -> int:
    """The largest canonical Value of a JSON value whose compact JSON is ``json_bytes`` long.

    Per value, Value bytes <= 4.5 x (JSON bytes + 1), by induction: a scalar is at most 9
    Value bytes for at least 1 JSON byte; a string adds 3 bytes (5-byte header for 2
    quotes); a list or map adds 5 header bytes where JSON adds brackets and one comma per
    element, and a map key adds 5 where JSON adds quotes and a colon. The worst case is a
    list of one-digit integers, ``[0,0,...]``: 2 JSON bytes and 9 Value bytes per element.
    """
    return 9 * (json_bytes + 1) // 2


def result_frame_bytes(result_bytes: int) -> int:
    """The largest result_recorded frame for a result within the executor result limit,
    carried in an epoch's (30,2) (a v1 journal's frame is 10 bytes smaller)."""
    return frame_size(min(EPOCH_CARRY_BYTES + RESULT_PAYLOAD_OVERHEAD
                          + json_value_bytes(result_bytes), MAX_PAYLOAD))


def failure_frame_bytes(error_bytes: int) -> int:
    """The largest failure_recorded frame for an error object within the error limit,
    carried in an epoch's (30,2) (a v1 journal's frame is 10 bytes smaller)."""
    return frame_size(min(EPOCH_CARRY_BYTES + FAILURE_PAYLOAD_OVERHEAD
                          + json_value_bytes(error_bytes), MAX_PAYLOAD))


class HistoryCaps(Frozen):
    """The two optional caps; None means unlimited."""

    __slots__ = ("max_history_bytes", "max_segments", "result_bytes", "error_bytes")
    max_history_bytes: int | None
    max_segments: int | None
    result_bytes: int  # the executor limits the reserve covers
    error_bytes: int

    def __init__(self, max_history_bytes: int | None = None, max_segments: int | None = None,
                 result_bytes: int = DEFAULT_RESULT_BYTES,
                 error_bytes: int = DEFAULT_ERROR_BYTES) -> None:
        set_field(self, "max_history_bytes", max_history_bytes)
        set_field(self, "max_segments", max_segments)
        set_field(self, "result_bytes", result_bytes)
        set_field(self, "error_bytes", error_bytes)
        self._check()

    def _check(self) -> None:
        for option in ("max_history_bytes", "max_segments", "result_bytes", "error_bytes"):
            value = getattr(self, option)
            if value is not None and (type(value) is not int or value < 1):
                raise ConfigurationError(option, f"must be a positive integer or unset, got {value!r}")


class _Layout(Record):
    """Where the journal will be after the frames accounted so far."""

    __slots__ = ("history_bytes", "segments", "active_size")
    history_bytes: int
    segments: int
    active_size: int

    def __init__(self, history_bytes: int, segments: int, active_size: int) -> None:
        self.history_bytes = history_bytes
        self.segments = segments
        self.active_size = active_size

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
        # neither cap is set: ``admit`` never refuses (the caps never change)
        self.uncapped = caps.max_history_bytes is None and caps.max_segments is None
        self.rotation_target = rotation_target
        self.layout = _Layout(history_bytes, segments, active_size)
        # Frames accounted but not placed in ``layout`` yet, in bytes. Every account adds
        # its frames' sizes here and calls ``place`` only when the sum passes ``room``, the
        # bytes the active segment still takes without a rotation (the engine's uncapped
        # commits do the same inline). Every unplaced frame fits (their sum is within
        # ``room``), so placing them is one addition; the readers and the admissions place
        # them first.
        self.unplaced = 0
        self.room = rotation_target - FOOTER_SIZE - active_size
        finishing = FINISH_FRAME_BYTES + max(result_frame_bytes(caps.result_bytes),
                                             failure_frame_bytes(caps.error_bytes))
        # Each of the two frames rotates at most once; both fit one fresh segment unless
        # the rotation target is smaller than that (then two rotations are possible).
        fresh = HEADER_SIZE + finishing + FOOTER_SIZE
        self.reserve_segments = 1 if fresh <= rotation_target else 2
        self.reserve_bytes = finishing + self.reserve_segments * (HEADER_SIZE + FOOTER_SIZE)

    @classmethod
    def for_journal(cls, journal: Journal, caps: HistoryCaps) -> "HistoryBudget":
        """A budget positioned at the journal's current tail (call right after recovery)."""
        return cls(caps, journal.rotation_target, history_bytes=journal.history_bytes,
                   segments=journal.segment_id, active_size=journal.size)

    @property
    def history_bytes(self) -> int:
        if self.unplaced:
            self.place()
        return self.layout.history_bytes

    @property
    def segments(self) -> int:
        if self.unplaced:
            self.place()
        return self.layout.segments

    def place(self, *last: int) -> None:
        """Place the unplaced frames in ``layout``: ``last``, the sizes of the frames added
        to ``unplaced`` last (the ones that took it past ``room``), one by one by the
        rotation rule; every frame before them fits the active segment (one addition).
        Then ``room`` is the active segment's again. Every account, and the engine's
        uncapped commits inline:

            history.unplaced = unplaced = history.unplaced + frame_size
            if unplaced > history.room:
                history.place(frame_size)
        """
        layout = self.layout
        fitting = self.unplaced - sum(last)
        layout.active_size += fitting
        layout.history_bytes += fitting
        target = self.rotation_target
        for size in last:
            layout.add(size, target)
        self.unplaced = 0
        self.room = target - FOOTER_SIZE - layout.active_size

    def account(self, frame_sizes: Iterable[int]) -> None:
        """Record frames the engine emitted that are not admissions. Never refuses."""
        for size in frame_sizes:
            self.unplaced = unplaced = self.unplaced + size
            if unplaced > self.room:
                self.place(size)

    def account_payload(self, payload_length: int) -> None:
        """``account((frame_size(payload_length),))`` in one step (the engine's per-commit
        path when nothing can be refused)."""
        size = RECORD_OVERHEAD + payload_length
        self.unplaced = unplaced = self.unplaced + size
        if unplaced > self.room:
            self.place(size)

    def account_payloads(self, first: int, second: int) -> None:
        """``account_payload(first)`` then ``account_payload(second)`` in one call (a
        success's result and finish records)."""
        first += RECORD_OVERHEAD
        second += RECORD_OVERHEAD
        self.unplaced = unplaced = self.unplaced + first + second
        if unplaced > self.room:
            self.place(first, second)

    def admit(self, frame_sizes: Iterable[int], active_executions: int) -> None:
        """Check then account frames that are not the end of an execution.

        ``active_executions`` is the number of executions running once these frames are
        applied (a start counts itself). Refuses with ``RequestRefused`` code ``capacity``
        and reason ``max_history_bytes`` or ``max_segments`` when the frames plus the
        reserve of every active execution would pass a cap; nothing is accounted then.
        """
        if self.uncapped:
            self.account(frame_sizes)  # nothing capped: nothing to refuse
            return
        self.layout = self._projected(frame_sizes, active_executions)
        self.place()  # nothing unplaced: ``room`` becomes the new layout's

    def check(self, frame_sizes: Iterable[int], active_executions: int) -> None:
        """Refuse as ``admit`` would, accounting nothing (frames admitted one by one later,
        all or none)."""
        self._projected(frame_sizes, active_executions)

    def _projected(self, frame_sizes: Iterable[int], active_executions: int) -> _Layout:
        if self.unplaced:
            self.place()
        projected = replace(self.layout)
        for size in frame_sizes:
            projected.add(size, self.rotation_target)
        reserve_bytes = active_executions * self.reserve_bytes
        reserve_segments = active_executions * self.reserve_segments
        caps = self.caps
        if caps.max_history_bytes is not None and projected.history_bytes + reserve_bytes > caps.max_history_bytes:
            raise RequestRefused(
                f"history would reach {projected.history_bytes} bytes plus a {reserve_bytes}-byte "
                f"finishing reserve for {active_executions} running executions, over "
                f"max_history_bytes {caps.max_history_bytes}",
                code="capacity", reason="max_history_bytes")
        if caps.max_segments is not None and projected.segments + reserve_segments > caps.max_segments:
            raise RequestRefused(
                f"history would reach {projected.segments} segments plus {reserve_segments} "
                f"reserved, over max_segments {caps.max_segments}",
                code="capacity", reason="max_segments")
        return projected
