"""Pure-Python twin of ``csrc/snapshots.c``: the Store-v2 (7,1) snapshot batch fast path.

``snapshots_scan(buf, records, max_depth, max_nodes, max_binary)`` takes ``records`` as
``(payload_offset, payload_length)`` and returns one flat list of ``SNAPSHOT_ROW`` integers
per record. A record is ``EVENT_FAST`` only when its prefix is well-formed, its body a
canonical Value within budget *and* a valid, credible snapshot body (storage.md §3.5);
anything else is ``EVENT_SLOW`` with zeros, for the exact decoder to refuse. The walk
mirrors the C one step for step, on already-validated bytes.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tay._native._pure_events import (
    ATTEMPT_MAX, EVENT_FAST, EVENT_ROW, EVENT_SLOW, MAX_ATTEMPTS, TAPE_CAPACITY, TIME_MAX,
    U64_MAX, _definition, _Slow, _Walker, DEFINITION_LENGTH,
)
from tay._native._pure_value import value_decode
from tay._native.errors import ValueCodecError

SNAPSHOT_ROW = 40
(STATUS, REVISION, CYCLE, EXECUTION, NIL, ATTEMPT, ATTEMPTED_AT, ORDER, COMPLETED_AT,
 DIAGNOSTIC, ELIGIBLE_AT, INSERTED_AT, NEXT_ATTEMPT, STATE, TERMINAL_AT, BODY) = range(16)
DEFINITION = 16  # an Event-v1 row's slots (its DEFINITION, ARGS, ... NIL) start here
STATES = ("scheduled", "available", "executing", "retryable", "completed", "cancelled",
          "discarded")
PREFIX = 33  # job_id 16 | revision 8 | cycle 8 | exec_present 1
_STATE_BYTES = {name.encode(): index for index, name in enumerate(STATES)}
assert EVENT_ROW + DEFINITION == SNAPSHOT_ROW and ATTEMPT_MAX < U64_MAX


def _u64(d: bytes, pos: int) -> int:
    return int.from_bytes(d[pos:pos + 8], "big")


def _body(w: _Walker, start: int) -> int:
    row, d = w.row, w.d
    snapshot_row = row
    pos = w.open_map(start, 11)
    for name, low, high, slot in (("attempt", 0, U64_MAX, None),
                                  ("attempted_at", 0, TIME_MAX, ATTEMPTED_AT),
                                  ("availability_order", 1, U64_MAX, ORDER),
                                  ("completed_at", 0, TIME_MAX, COMPLETED_AT)):
        value = w.key(pos, name)
        if slot is None:
            row[ATTEMPT] = w.uint(value, low, high)
        else:
            row[slot] = w.opt_uint(value, low, high, slot)
        pos = w.skip(value)
    definition = w.key(pos, "definition")
    inner = _Walker(d, [0] * EVENT_ROW)
    _definition(inner, definition)
    row[DEFINITION:] = inner.row
    pos = definition + inner.row[DEFINITION_LENGTH]
    w.row = snapshot_row
    diagnostic = w.key(pos, "diagnostic")
    if d[diagnostic] == 0x00:
        row[NIL] |= 1 << DIAGNOSTIC
    else:
        code_at = w.key(w.open_map(diagnostic, 2), "code")
        row[DIAGNOSTIC] = w.uint(code_at, 1, 7)
        w.uint(w.key(code_at + 9, "version"), 1, 1)
    pos = w.skip(diagnostic)
    (eligible, inserted, next_attempt, state, terminal), end = w.fields(
        pos, ("eligible_at", "inserted_at", "next_attempt", "state", "terminal_at"))
    row[ELIGIBLE_AT] = w.opt_uint(eligible, 0, TIME_MAX, ELIGIBLE_AT)
    row[INSERTED_AT] = w.uint(inserted, 0, TIME_MAX)
    row[NEXT_ATTEMPT] = w.opt_uint(next_attempt, 1, U64_MAX, NEXT_ATTEMPT)
    if d[state] != 0x06:
        raise _Slow
    index = _STATE_BYTES.get(d[state + 5:state + 5 + int.from_bytes(d[state + 1:state + 5], "big")])
    if index is None:
        raise _Slow
    row[STATE] = index
    row[TERMINAL_AT] = w.opt_uint(terminal, 0, TIME_MAX, TERMINAL_AT)
    return end


def _state_rules(row: list[int]) -> bool:
    def present(slot: int) -> bool:
        return not (row[NIL] >> slot) & 1

    state, attempt, revision = row[STATE], row[ATTEMPT], row[REVISION]
    nxt, eligible, order = present(NEXT_ATTEMPT), present(ELIGIBLE_AT), present(ORDER)
    completed, execution = present(COMPLETED_AT), present(EXECUTION)
    attempted, terminal, diag = present(ATTEMPTED_AT), present(TERMINAL_AT), present(DIAGNOSTIC)
    if state == 0:  # scheduled
        return (nxt and eligible and not order and not execution and not completed
                and not terminal and revision == 1 and row[CYCLE] == 1 and attempt == 0
                and row[NEXT_ATTEMPT] == 1 and not attempted and not diag)
    if state == 1:  # available: fresh, or after an attempt
        return (nxt and eligible and order and not terminal
                and ((attempt == 0 and row[NEXT_ATTEMPT] == 1 and not attempted)
                     or (attempt > 0 and attempted)))
    if state == 2:  # executing
        return (nxt and execution and not eligible and not order and not terminal
                and attempt > 0 and attempted and row[EXECUTION] == revision
                and row[NEXT_ATTEMPT] == attempt)
    if state == 3:  # retryable
        return nxt and eligible and not order and not terminal and attempt > 0 and attempted \
            and diag
    if state == 4:  # completed
        return (completed and not nxt and not eligible and not order and not execution
                and terminal and row[TERMINAL_AT] == row[COMPLETED_AT] and attempt > 0
                and attempted)
    return (not nxt and not eligible and not order and not execution and not completed
            and terminal and (state == 5 or (attempt > 0 and attempted and diag)))


def _check(p: bytes, row: list[int]) -> bool:
    if len(p) < PREFIX or p[32] > 1:
        return False
    body = PREFIX + 8 * p[32]
    if len(p) <= body or p[:16] == bytes(16):
        return False
    row[REVISION], row[CYCLE] = revision, cycle = _u64(p, 16), _u64(p, 24)
    if not 1 <= cycle <= revision:
        return False
    if p[32]:
        row[EXECUTION] = _u64(p, PREFIX)
        if not 1 <= row[EXECUTION] <= revision:
            return False
    else:
        row[NIL] |= 1 << EXECUTION
    row[BODY] = body
    try:
        end = _body(_Walker(p, row), body)
    except _Slow:
        return False
    if end != len(p):
        return False
    max_attempts = row[DEFINITION + MAX_ATTEMPTS]
    if row[ATTEMPT] > max_attempts:
        return False
    if not (row[NIL] >> NEXT_ATTEMPT) & 1 and row[NEXT_ATTEMPT] > max_attempts:
        return False
    return bool(_state_rules(row))


def batch_rows(buf: Any, records: Sequence[tuple[int, int]], limits: tuple, width: int,
               body_of: Callable[[bytes], int], check: Callable[[bytes, list[int]], bool]
               ) -> list[int]:
    """The batch loop both Store-v2 twins share (``scan_batch`` in ``csrc/value_walk.h``)."""
    out: list[int] = []
    slow = [EVENT_SLOW] + [0] * (width - 1)
    for offset, length in records:
        data = bytes(buf[offset:offset + length])
        body = body_of(data)
        if body == 0 or length <= body or length - body > TAPE_CAPACITY:
            out += slow
            continue
        try:
            value_decode(data[body:], *limits)
        except ValueCodecError:
            out += slow
            continue
        row = [0] * width
        if check(data, row):
            row[STATUS] = EVENT_FAST
            out += row
        else:
            out += slow
    return out


def _body_of(data: bytes) -> int:
    return PREFIX + 8 * (data[32] == 1) if len(data) > PREFIX else 0


def snapshots_scan(buf: Any, records: Sequence[tuple[int, int]], max_depth: int = 64,
                   max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat rows (``SNAPSHOT_ROW`` ints per record) for ``(offset, length)`` slices."""
    return batch_rows(buf, records, (max_depth, max_nodes, max_binary), SNAPSHOT_ROW,
                      _body_of, _check)
