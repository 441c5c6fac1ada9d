"""Pure-Python twin of ``csrc/events.c``: the Event-v1 batch fast path.

``events_scan(buf, records, max_depth, max_nodes, max_binary)`` takes ``records`` as
``(payload_offset, payload_length, type, schema)`` and returns one flat list of
``EVENT_ROW`` integers per record (see ``tay/_native/__init__.py`` for the slots). A record
is ``EVENT_FAST`` only when its payload is a canonical Value within budget *and* a
well-formed event of its pair; anything else is ``EVENT_SLOW`` with zeros, for the exact
decoder to refuse. The walk mirrors the C one step for step, on already-validated bytes.
"""

from __future__ import annotations

from typing import Any, Sequence

from tay._native._pure_value import value_decode
from tay._native.errors import ValueCodecError

EVENT_FAST, EVENT_SLOW, EVENT_ROW = 0, 1, 24
(STATUS, AT, EXPECTED, JOB_ID, NIL, A, B, C, D, E, F, DEFINITION, DEFINITION_LENGTH, ARGS,
 ARGS_LENGTH, MAX_ATTEMPTS, QUEUE, QUEUE_LENGTH, WORKER, WORKER_LENGTH, SCHEDULED_AT,
 TIMEOUT_MS, END, ARGS_NODES) = range(24)
TAPE_CAPACITY = 65536  # longer payloads always take the slow path (as in C)
TIME_MAX, U64_MAX, ATTEMPT_MAX, TIMEOUT_MAX_MS = 2**63 - 1, 2**64 - 1, 65535, 86_400_000
_KEY_COUNTS = (5, 4, 5, 9, 4, 5, 4, 4, 3, 5)
# slot 8: a job step with no field of its own (an operator's requeue, expedite or deletion);
# slot 9: a day's totals (32,2), which names no job
JOB_STEP_TYPES = (23, 27, 29)
DAY_MAX = (2**63 - 1) // 86_400_000  # the last UTC day whose first millisecond is a Time
ERROR_TYPE_MAX_BYTES = 128
# a failure's error keys in canonical order, each with the slot of its text's offset (the
# length follows it); tay.storage.events.fast builds the error from the same table
ERROR_TEXT_SLOTS = (("message", A), ("traceback", C), ("type", E))
_POLICY = (("base_ms", 1000), ("cap_ms", 60000), ("jitter_divisor", 4), ("version", 1))


class _Slow(Exception):
    """The record is not a well-formed fast-path event."""


def _u32(d: bytes, pos: int) -> int:
    return int.from_bytes(d[pos:pos + 4], "big")


class _Walker:
    def __init__(self, data: bytes, row: list[int]) -> None:
        self.d, self.row, self.has_bytes, self.nodes = data, row, False, 0

    def skip(self, pos: int) -> int:
        self.nodes += 1  # values stepped over, map keys included
        tag = self.d[pos]
        if tag <= 0x02:
            return pos + 1
        if tag <= 0x05:
            return pos + 9
        if tag <= 0x07:
            self.has_bytes |= tag == 0x07
            return pos + 5 + _u32(self.d, pos + 1)
        count = _u32(self.d, pos + 1) * (1 if tag == 0x08 else 2)
        pos += 5
        for _ in range(count):
            pos = self.skip(pos)
        return pos

    def open_map(self, pos: int, count: int) -> int:
        if self.d[pos] != 0x09 or _u32(self.d, pos + 1) != count:
            raise _Slow
        return pos + 5

    def key(self, pos: int, name: str) -> int:
        raw = name.encode()
        if _u32(self.d, pos + 1) != len(raw) or self.d[pos + 5:pos + 5 + len(raw)] != raw:
            raise _Slow
        return pos + 5 + len(raw)

    def uint(self, pos: int, low: int, high: int) -> int:
        if self.d[pos] != 0x04:
            raise _Slow
        number = int.from_bytes(self.d[pos + 1:pos + 9], "big")
        if not low <= number <= high:
            raise _Slow
        return number

    def opt_uint(self, pos: int, low: int, high: int, slot: int) -> int:
        if self.d[pos] == 0x00:
            self.row[NIL] |= 1 << slot
            return 0
        return self.uint(pos, low, high)

    def job_id(self, pos: int) -> None:
        if self.d[pos] != 0x07 or _u32(self.d, pos + 1) != 16 or \
                self.d[pos + 5:pos + 21] == bytes(16):
            raise _Slow
        self.row[JOB_ID] = pos + 5

    def key_text(self, pos: int, slot: int) -> None:
        length = _u32(self.d, pos + 1) if self.d[pos] == 0x06 else 0
        if not 1 <= length <= 255 or 0 in self.d[pos + 5:pos + 5 + length]:
            raise _Slow
        self.row[slot], self.row[slot + 1] = pos + 5, length

    def fields(self, pos: int, names: Sequence[str]) -> tuple[list[int], int]:
        """Value positions of consecutive keys ``names`` and the position after them."""
        found = []
        for name in names:
            value = self.key(pos, name)
            found.append(value)
            pos = self.skip(value)
        return found, pos


def _definition(w: _Walker, start: int) -> int:
    row = w.row
    pos = w.open_map(start, 8)
    args = w.key(pos, "args")
    if w.d[args] != 0x09:
        raise _Slow
    w.nodes = 0
    pos = w.skip(args)
    if w.has_bytes:
        raise _Slow
    row[ARGS], row[ARGS_LENGTH], row[ARGS_NODES] = args, pos - args, w.nodes
    (version, attempts, queue, policy, scheduled, timeout, worker), end = w.fields(
        pos, ("definition_version", "max_attempts", "queue_key", "retry_policy",
              "scheduled_at", "timeout_ms", "worker_key"))
    w.uint(version, 1, 1)
    row[MAX_ATTEMPTS] = w.uint(attempts, 1, ATTEMPT_MAX)
    w.key_text(queue, QUEUE)
    inner = w.open_map(policy, 4)
    for name, expected in _POLICY:
        value = w.key(inner, name)
        w.uint(value, expected, expected)
        inner = value + 9
    row[SCHEDULED_AT] = w.opt_uint(scheduled, 0, TIME_MAX, SCHEDULED_AT)
    row[TIMEOUT_MS] = w.uint(timeout, 1, TIMEOUT_MAX_MS)
    w.key_text(worker, WORKER)
    row[DEFINITION], row[DEFINITION_LENGTH] = start, end - start
    return end


def _finished(w: _Walker, pos: int, at: int) -> int:
    row = w.row
    (diag, disposition, token, revision, job_id, next_attempt, next_due, outcome), end = \
        w.fields(pos, ("diagnostic", "disposition", "execution_token", "expected_revision",
                       "job_id", "next_attempt", "next_due_at", "outcome"))
    row[B] = w.uint(disposition, 0, 2)
    row[A] = w.uint(token, 1, U64_MAX)
    w.job_id(job_id)
    row[C] = w.uint(outcome, 0, 3)
    row[EXPECTED] = w.uint(revision, 1, U64_MAX)
    _finish_rules(w, diag, next_attempt, next_due)
    return end


def _finish_rules(w: _Walker, diag: int, next_attempt: int, next_due: int) -> None:
    """job_finished's outcome rules on row[C] (outcome) and row[B] (disposition)."""
    row = w.row
    outcome_code, disposition_code = row[C], row[B]
    if outcome_code == 0:
        if w.d[diag] != 0x00 or disposition_code != 0:
            raise _Slow
        row[NIL] |= 1 << D
    else:
        inner = w.open_map(diag, 2)
        code_at = w.key(inner, "code")
        row[D] = code = w.uint(code_at, 1, 7)
        w.uint(w.key(code_at + 9, "version"), 1, 1)
        allowed = {1: (1, 2, 3, 4, 6), 2: (5,), 3: (7,)}[outcome_code]
        if code not in allowed or disposition_code == 0 or \
                (outcome_code == 3 and disposition_code != 1):
            raise _Slow
    if disposition_code == 1:
        row[E] = w.uint(next_attempt, 1, ATTEMPT_MAX)
        row[F] = w.uint(next_due, 0, TIME_MAX)
    elif w.d[next_attempt] != 0x00 or w.d[next_due] != 0x00:
        raise _Slow
    else:
        row[NIL] |= (1 << E) | (1 << F)


def _error(w: _Walker, start: int) -> None:
    """A failure's error object: 1..3 of message, traceback, type, each a text (the type at
    most ERROR_TYPE_MAX_BYTES); offsets and lengths in the A/B, C/D, E/F slots, an absent
    key's offset slot nil."""
    row, d = w.row, w.d
    if d[start] != 0x09 or not 1 <= _u32(d, start + 1) <= 3:
        raise _Slow
    row[NIL] |= (1 << A) | (1 << C) | (1 << E)
    pos, names = start + 5, iter(ERROR_TEXT_SLOTS)
    for _ in range(_u32(d, start + 1)):
        for name, slot in names:
            raw = name.encode()
            if _u32(d, pos + 1) == len(raw) and d[pos + 5:pos + 5 + len(raw)] == raw:
                break
        else:
            raise _Slow
        value = pos + 5 + len(raw)
        length = _u32(d, value + 1)
        if d[value] != 0x06 or (slot == E and length > ERROR_TYPE_MAX_BYTES):
            raise _Slow
        row[slot], row[slot + 1] = value + 5, length
        row[NIL] &= ~(1 << slot)
        pos = value + 5 + length


def _event(w: _Walker, rtype: int, schema: int) -> int:
    row = w.row
    slot = 6 if (rtype, schema) == (10, 2) else 7 if (rtype, schema) == (22, 2) \
        else 8 if schema == 2 and rtype in JOB_STEP_TYPES \
        else 9 if (rtype, schema) == (32, 2) \
        else rtype - 1 if schema == 1 and 1 <= rtype <= 6 else -1
    if slot < 0:
        raise _Slow
    pos = w.open_map(0, _KEY_COUNTS[slot])
    at_value = w.key(pos, "at")
    row[AT] = at = w.uint(at_value, 0, TIME_MAX)
    pos = w.skip(at_value)
    if slot == 3:
        return _finished(w, pos, at)
    if slot == 9:  # day_totals: completed A, day B, enqueued C, failed D; no job
        (completed, day, enqueued, failed), pos = w.fields(
            pos, ("completed", "day", "enqueued", "failed"))
        row[A], row[B] = w.uint(completed, 0, U64_MAX), w.uint(day, 0, DAY_MAX)
        row[C], row[D] = w.uint(enqueued, 0, U64_MAX), w.uint(failed, 0, U64_MAX)
        return pos
    if slot == 0:
        pos = _definition(w, w.key(pos, "definition"))
        value = w.key(pos, "eligible_at")
        row[A] = w.uint(value, 0, TIME_MAX)
        scheduled_nil = (row[NIL] >> SCHEDULED_AT) & 1
        if row[A] != (at if scheduled_nil else row[SCHEDULED_AT]):
            raise _Slow
        pos = w.skip(value)
    elif slot == 1:
        value = w.key(pos, "due_at")
        row[A] = w.uint(value, 0, at)
        pos = w.skip(value)
    elif slot == 2:
        (attempt, cycle), pos = w.fields(pos, ("attempt", "cycle_token"))
        row[A], row[B] = w.uint(attempt, 1, ATTEMPT_MAX), w.uint(cycle, 1, U64_MAX)
    elif slot == 4:
        value = w.key(pos, "execution_token")
        row[A] = w.opt_uint(value, 1, U64_MAX, A)
        pos = w.skip(value)
    elif slot == 7:
        value = w.key(pos, "error")
        _error(w, value)
        pos = w.skip(value)
    (revision, job_id), pos = w.fields(pos, ("expected_revision", "job_id"))
    row[EXPECTED] = w.uint(revision, 0, 0) if slot == 0 else w.uint(revision, 1, U64_MAX)
    w.job_id(job_id)
    if slot == 5:
        (mode, due), pos = w.fields(pos, ("mode", "new_due_at"))
        row[A], row[B] = w.uint(mode, 0, 1), w.uint(due, at, at)
    elif slot == 6:
        value = w.key(pos, "result")
        w.has_bytes = False
        pos = w.skip(value)
        if w.has_bytes:
            raise _Slow
        row[A], row[B] = value, pos - value
    return pos


def _one(buf: Any, offset: int, length: int, rtype: int, schema: int, limits: tuple) -> list[int]:
    row = [0] * EVENT_ROW
    row[STATUS] = EVENT_SLOW
    if length == 0 or length > TAPE_CAPACITY:
        return row
    data = bytes(buf[offset:offset + length])
    try:
        value_decode(data, *limits)
    except ValueCodecError:
        return row
    row[END] = length
    try:
        end = _event(_Walker(data, row), rtype, schema)
    except _Slow:
        end = -1
    if end != length:
        row = [0] * EVENT_ROW
        row[STATUS] = EVENT_SLOW
        return row
    row[STATUS] = EVENT_FAST
    return row


def events_scan(buf: Any, records: Sequence[tuple[int, int, int, int]], max_depth: int = 64,
                max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat rows (``EVENT_ROW`` ints per record) for ``(offset, length, type, schema)``."""
    out: list[int] = []
    limits = (max_depth, max_nodes, max_binary)
    for offset, length, rtype, schema in records:
        out += _one(buf, offset, length, rtype, schema, limits)
    return out
