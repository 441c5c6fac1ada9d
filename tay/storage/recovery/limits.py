"""Recovery's operational limits (storage.md §7 table): budgets and time limits.

``RecoveryOptions`` holds the budgets (payload, directory entries, segment bytes, replay
records, event limits) and the four time limits; ``RecoveryTimer`` enforces the time
limits at the checkpoints recovery passes (each listing, STORE read, segment open, scan
window, replay batch, stage boundary and activation barrier).

Time is read from an injected clock (monotonic milliseconds) so tests can be exact.
Python cannot interrupt a blocking read or fsync, so a limit is judged at the checkpoint
that follows the step: the step that crossed it finishes, nothing after it starts.
Every time refusal happens before activation creates or opens anything for writing, so
storage is untouched (fsync barriers change no bytes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tay._frozen import Frozen, set_field
from tay.failures import RecoveryRefused
from tay.storage import layout
from tay.storage.formats.value import DecodeLimits

Clock = Callable[[], int]  # monotonic milliseconds
MAX_PAYLOAD = 16_777_216
TIME_LIMITS = ("deadline_ms", "activation_deadline_ms", "activation_window_ms",
               "io_timeout_ms")
TIME_LIMIT_MAX = 2**63 - 1


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RecoveryOptions(Frozen):
    """Operational budgets and time limits (§7 table); None means unbounded.

    - ``deadline_ms``: validation through revalidation, from the call.
    - ``activation_deadline_ms``: the activation stage, from its start.
    - ``activation_window_ms``: how long the replayed candidate may be held before
      activation opens the journal (revalidation runs inside it). Read-only recovery
      (``activate=False``) holds no candidate for activation and ignores it.
    - ``io_timeout_ms``: one I/O step (a listing, a STORE read, a segment open and map,
      one scan window, one replay batch, one fsync); capped by the remaining deadline.
    """

    __slots__ = ("max_decode_payload_bytes", "max_directory_entries",
                 "max_total_segment_bytes", "max_replay_records", "event_limits",
                 "deadline_ms", "activation_deadline_ms", "activation_window_ms",
                 "io_timeout_ms")
    max_decode_payload_bytes: int
    max_directory_entries: int
    max_total_segment_bytes: int | None
    max_replay_records: int | None
    event_limits: DecodeLimits
    deadline_ms: int
    activation_deadline_ms: int
    activation_window_ms: int
    io_timeout_ms: int

    def __init__(self, max_decode_payload_bytes: int = MAX_PAYLOAD,
                 max_directory_entries: int = layout.DEFAULT_MAX_DIRECTORY_ENTRIES,
                 max_total_segment_bytes: int | None = None,
                 max_replay_records: int | None = None,
                 event_limits: DecodeLimits | None = None, deadline_ms: int = 900_000,
                 activation_deadline_ms: int = 900_000, activation_window_ms: int = 30_000,
                 io_timeout_ms: int = 10_000) -> None:
        set_field(self, "max_decode_payload_bytes", max_decode_payload_bytes)
        set_field(self, "max_directory_entries", max_directory_entries)
        set_field(self, "max_total_segment_bytes", max_total_segment_bytes)
        set_field(self, "max_replay_records", max_replay_records)
        set_field(self, "event_limits", DecodeLimits() if event_limits is None else event_limits)
        set_field(self, "deadline_ms", deadline_ms)
        set_field(self, "activation_deadline_ms", activation_deadline_ms)
        set_field(self, "activation_window_ms", activation_window_ms)
        set_field(self, "io_timeout_ms", io_timeout_ms)

    def validate(self) -> None:
        """Refuse (kind ``argument``, reason ``<option>_out_of_range``) a bad option."""
        if not _is_int(self.max_decode_payload_bytes) or \
                not 0 <= self.max_decode_payload_bytes <= MAX_PAYLOAD:
            raise _argument("max_decode_payload_bytes", self.max_decode_payload_bytes)
        if not _is_int(self.max_directory_entries) or self.max_directory_entries < 1:
            raise _argument("max_directory_entries", self.max_directory_entries)
        for name in ("max_total_segment_bytes", "max_replay_records"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise _argument(name, value)
        for name in TIME_LIMITS:
            value = getattr(self, name)
            if not _is_int(value) or not 0 < value <= TIME_LIMIT_MAX:
                raise _argument(name, value)


def _is_int(value: object) -> bool:
    return type(value) is int


def _argument(option: str, value: object) -> RecoveryRefused:
    return RecoveryRefused("argument", f"{option}_out_of_range", stage="validation",
                           option=option, value=repr(value))


class RecoveryTimer:
    """The time limits of one recovery, checked at each checkpoint.

    ``check`` refuses with kind ``resource_limit``, reason the option that ran out,
    ``stage`` and the last position reached (path, segment, offset, sequence), plus
    ``elapsed_ms`` / ``limit_ms``.
    """

    def __init__(self, options: RecoveryOptions, clock: Clock = monotonic_ms) -> None:
        self.options = options
        self.clock = clock
        self.started = self.last = clock()
        self.window_opened: int | None = None
        self.activation_started: int | None = None

    def open_window(self) -> None:
        """Replay finished: the candidate is held from now until activation opens it."""
        self.window_opened = self.clock()

    def start_activation(self) -> None:
        self.activation_started = self.clock()

    def check(self, stage: str, **position: object) -> None:
        now = self.clock()
        step, self.last = now - self.last, now
        if step > self.options.io_timeout_ms:
            raise self._refuse("io_timeout_ms", step, stage, position)
        if self.activation_started is None:
            self._limit("deadline_ms", now - self.started, stage, position)
        else:
            self._limit("activation_deadline_ms", now - self.activation_started, stage,
                        position)
        if self.window_opened is not None:
            self._limit("activation_window_ms", now - self.window_opened, stage, position)

    def _limit(self, option: str, elapsed: int, stage: str, position: dict) -> None:
        if elapsed > getattr(self.options, option):
            raise self._refuse(option, elapsed, stage, position)

    def _refuse(self, option: str, elapsed: int, stage: str,
                position: dict) -> RecoveryRefused:
        return RecoveryRefused("resource_limit", option, stage=stage, elapsed_ms=elapsed,
                               limit_ms=getattr(self.options, option), **position)
