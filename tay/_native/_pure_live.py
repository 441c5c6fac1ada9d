"""Pure-Python twin of ``csrc/live_rows.c``: live job rows and the apply of (8,1) mutation rows.

``LiveTable(next_order=1)`` maps a 16-byte job id to a row of ``LIVE_ROW`` integers, the
durable fields of its ``JobState`` a u64 can hold (``STATE`` indexes ``transitions.STATES``;
bit k of ``NIL`` is set when slot k is None, which then holds 0), rows numbered in insert
order. ``apply(buf, offsets, rows)`` applies ``mutations_scan`` rows (flat, ``MUTATION_ROW``
ints each; row k's job id at ``buf[offsets[k]:offsets[k] + 16]``) in order, as
``transitions.apply`` and ``EpochReducer.mutation`` would, the allocator's order check
included, and returns ``(applied, numbers)``: how many it applied and each one's row number.
It stops before the first row it cannot apply (a slow row, a failure finish, a retry, or a
mutation the reducer refuses), which changes nothing: the caller takes that job the general
way. ``find(id)`` is a row number or None, ``get(number)`` the ``(id, row)``; ``hold(id)``
gives a job known only by its id a row that every apply refuses.
"""

from __future__ import annotations

from typing import Any, Sequence

from tay._native import _pure_events as er
from tay._native import _pure_mutations as mr
from tay._native.checks import check_apply_input

LIVE_ROW = 14
(STATE, REVISION, ATTEMPT, NEXT_ATTEMPT, CYCLE, EXECUTION, ELIGIBLE_AT, READY_ORDER,
 INSERTED_AT, ATTEMPTED_AT, COMPLETED_AT, TERMINAL_AT, MAX_ATTEMPTS, NIL) = range(LIVE_ROW)
SCHEDULED, AVAILABLE, EXECUTING, RETRYABLE, COMPLETED, CANCELLED, DISCARDED = range(7)
HELD = 7  # a row ``hold`` made: known only by its id, refused by every apply
_INSERT_NIL = (1 << EXECUTION) | (1 << ATTEMPTED_AT) | (1 << COMPLETED_AT) | (1 << TERMINAL_AT)
_CANCELLABLE = (SCHEDULED, AVAILABLE, EXECUTING, RETRYABLE)


def _bit(slot: int) -> int:
    return 1 << slot


class LiveTable:
    """Live job rows by id (the twin of ``tay_live_table``)."""

    def __init__(self, next_order: int = 1) -> None:
        if not 0 <= next_order < 2**64:
            raise ValueError("next_order must be a u64")
        self.next_order = next_order
        self._numbers: dict[bytes, int] = {}
        self._ids: list[bytes] = []
        self._rows: list[list[int]] = []

    def __len__(self) -> int:
        return len(self._rows)

    def find(self, job_id: bytes) -> int | None:
        return self._numbers.get(bytes(job_id))

    def get(self, number: int) -> tuple[bytes, tuple[int, ...]]:
        if not 0 <= number < len(self._rows):
            raise IndexError(f"no live row {number}")
        return self._ids[number], tuple(self._rows[number])

    def apply(self, buf: Any, offsets: Sequence[int], rows: Sequence[int]
              ) -> tuple[int, list[int]]:
        check_apply_input(len(buf), offsets, rows)
        numbers: list[int] = []
        width = mr.MUTATION_ROW
        for k, offset in enumerate(offsets):
            number = self.apply_one(bytes(buf[offset:offset + 16]), rows[k * width:(k + 1) * width])
            if number is None:
                break
            numbers.append(number)
        return len(numbers), numbers

    def retryable(self, number: int, revision: int, next_attempt: int,
                  eligible_at: int) -> None:
        """Row ``number`` left retryable at ``revision`` by a worker failure the tail walk
        checked (the table applies no failure): its next attempt and the retry's due time,
        no execution nor order (``tay_live_retryable``)."""
        if not 0 <= number < len(self._rows):
            raise IndexError(f"no live row {number}")
        w = self._rows[number]
        w[STATE], w[REVISION], w[NEXT_ATTEMPT], w[ELIGIBLE_AT] = (
            RETRYABLE, revision, next_attempt, eligible_at)
        w[EXECUTION] = w[READY_ORDER] = 0
        w[NIL] = (w[NIL] & ~(_bit(NEXT_ATTEMPT) | _bit(ELIGIBLE_AT))) \
            | _bit(EXECUTION) | _bit(READY_ORDER)

    def hold(self, job_id: bytes) -> int | None:
        """A row for a job known only by its id (the tail walk meets a record of a job
        inserted before its range): state ``HELD``, which every later apply refuses, an
        insert of that id included; its number, or None when the id has a row
        (``tay_live_hold``)."""
        job_id = bytes(job_id)
        if len(job_id) != 16:
            raise ValueError("a job id is 16 bytes")
        if job_id in self._numbers:
            return None
        number = len(self._rows)
        self._numbers[job_id] = number
        self._ids.append(job_id)
        row = [0] * LIVE_ROW
        # no state the applies accept, no revision a record expects: every slot nil
        row[STATE], row[REVISION], row[NIL] = HELD, 2**64 - 1, _bit(NIL) - 1
        self._rows.append(row)
        return number

    def apply_one(self, job_id: bytes, m: Sequence[int]) -> int | None:
        """One mutation row: its job's row number, or None (nothing changed)."""
        if m[er.STATUS] != er.EVENT_FAST:
            return None
        kind, at, expected = m[mr.KIND], m[er.AT], m[er.EXPECTED]
        revision, nil, order = expected + 1, m[er.NIL], m[mr.ORDER]
        ordered = not (nil >> mr.ORDER) & 1
        if ordered and order != self.next_order:
            return None
        number = self._numbers.get(job_id)
        if kind == 1:
            available = m[er.A] <= at
            if number is not None or available != ordered:
                return None
            number = len(self._rows)
            self._numbers[job_id] = number
            self._ids.append(job_id)
            self._rows.append([
                AVAILABLE if available else SCHEDULED, revision, 0, 1, revision, 0, m[er.A],
                order if available else 0, at, 0, 0, 0, m[er.MAX_ATTEMPTS],
                _INSERT_NIL | (0 if available else _bit(READY_ORDER))])
            self.next_order += ordered
            return number
        if number is None:
            return None
        w = self._rows[number]
        state, wnil = w[STATE], w[NIL]
        if w[REVISION] != expected:
            return None
        if kind == 2:
            if state not in (SCHEDULED, RETRYABLE) or wnil & _bit(ELIGIBLE_AT) \
                    or w[ELIGIBLE_AT] != m[er.A]:
                return None
            w[STATE], w[READY_ORDER] = AVAILABLE, order
            wnil &= ~_bit(READY_ORDER)
        elif kind == 3:
            attempt = m[er.A]
            if state != AVAILABLE or wnil & _bit(NEXT_ATTEMPT) or attempt != w[NEXT_ATTEMPT] \
                    or attempt > w[MAX_ATTEMPTS] or m[er.B] != w[CYCLE] \
                    or wnil & _bit(ELIGIBLE_AT) or at < w[ELIGIBLE_AT]:
                return None
            w[STATE], w[EXECUTION], w[ATTEMPT], w[ATTEMPTED_AT] = EXECUTING, revision, attempt, at
            w[ELIGIBLE_AT] = w[READY_ORDER] = 0
            wnil = (wnil & ~(_bit(EXECUTION) | _bit(ATTEMPTED_AT))) \
                | _bit(ELIGIBLE_AT) | _bit(READY_ORDER)
        elif kind == 4:
            if state != EXECUTING or wnil & _bit(EXECUTION) or m[er.A] != w[EXECUTION] \
                    or m[er.C] != 0 or m[er.B] != 0:
                return None
            w[STATE] = COMPLETED
            w[NEXT_ATTEMPT] = w[ELIGIBLE_AT] = w[EXECUTION] = 0
            w[COMPLETED_AT] = w[TERMINAL_AT] = at
            wnil = (wnil & ~(_bit(COMPLETED_AT) | _bit(TERMINAL_AT))) \
                | _bit(NEXT_ATTEMPT) | _bit(ELIGIBLE_AT) | _bit(EXECUTION)
        elif kind == 5:
            token_nil = (nil >> er.A) & 1
            if state not in _CANCELLABLE:
                return None
            if state == EXECUTING:
                if token_nil or wnil & _bit(EXECUTION) or m[er.A] != w[EXECUTION]:
                    return None
            elif not token_nil:
                return None
            w[STATE] = CANCELLED
            w[EXECUTION] = w[NEXT_ATTEMPT] = w[ELIGIBLE_AT] = w[READY_ORDER] = 0
            w[TERMINAL_AT] = at
            wnil = (wnil & ~_bit(TERMINAL_AT)) | _bit(EXECUTION) | _bit(NEXT_ATTEMPT) \
                | _bit(ELIGIBLE_AT) | _bit(READY_ORDER)
        else:
            return None
        w[REVISION], w[NIL] = revision, wnil
        self.next_order += ordered
        return number
