"""Pure-Python twin of ``csrc/mutations.c``: the Store-v2 (8,1) mutation batch fast path.

``mutations_scan(buf, records, max_depth, max_nodes, max_binary)`` takes ``records`` as
``(payload_offset, payload_length)`` and returns one flat list of ``MUTATION_ROW`` integers
per record: the Event-v1 row (``_pure_events`` slots, offsets relative to the mutation
payload, the job id at offset 0) of the event the mutation stands for, then ORDER (nil: bit
ORDER of NIL) and KIND. ``EVENT_FAST`` only for a well-formed prefix, a canonical body
within budget and a valid event of its kind with a valid availability order; anything else
is ``EVENT_SLOW`` with zeros, for the exact decoder to refuse.
"""

from __future__ import annotations

from typing import Any, Sequence

from tay._native._pure_events import (
    A, AT, ATTEMPT_MAX, B, C, DEFINITION_LENGTH, END, EVENT_ROW,
    EXPECTED, NIL, SCHEDULED_AT, TIME_MAX, U64_MAX, _definition, _finish_rules,
    _Slow, _Walker,
)
from tay._native._pure_snapshots import batch_rows

ORDER, KIND = EVENT_ROW, EVENT_ROW + 1
MUTATION_ROW = EVENT_ROW + 2
PREFIX = 41  # job_id 16 | kind 1 | expected 8 | new 8 | at 8
_ORDERED = (1, 2, 6)
_KEY_COUNTS = (3, 2, 2, 6, 1, 3)


def _body(w: _Walker, kind: int) -> int:
    row, d = w.row, w.d
    at = row[AT]
    pos = w.open_map(PREFIX, _KEY_COUNTS[kind - 1])
    if kind in _ORDERED:
        value = w.key(pos, "availability_order")
        row[ORDER] = w.opt_uint(value, 0, U64_MAX, ORDER)
        pos = w.skip(value)
    else:
        row[NIL] |= 1 << ORDER
    order_nil = (row[NIL] >> ORDER) & 1
    if kind == 1:
        definition = w.key(pos, "definition")
        _definition(w, definition)
        value = w.key(definition + row[DEFINITION_LENGTH], "eligible_at")
        row[A] = w.uint(value, 0, TIME_MAX)
        scheduled_nil = (row[NIL] >> SCHEDULED_AT) & 1
        if row[A] != (at if scheduled_nil else row[SCHEDULED_AT]) or \
                (row[A] <= at) != (not order_nil):
            raise _Slow
        return w.skip(value)
    if kind == 2:
        if order_nil:
            raise _Slow
        value = w.key(pos, "due_at")
        row[A] = w.uint(value, 0, at)
        return w.skip(value)
    if kind == 3:
        (attempt, cycle), end = w.fields(pos, ("attempt", "cycle_token"))
        row[A], row[B] = w.uint(attempt, 1, ATTEMPT_MAX), w.uint(cycle, 1, U64_MAX)
        return end
    if kind == 4:
        (diag, disposition, token, next_attempt, next_due, outcome), end = w.fields(
            pos, ("diagnostic", "disposition", "execution_token", "next_attempt",
                  "next_due_at", "outcome"))
        row[B] = w.uint(disposition, 0, 2)
        row[A] = w.uint(token, 1, U64_MAX)
        row[C] = w.uint(outcome, 0, 3)
        _finish_rules(w, diag, next_attempt, next_due)
        return end
    if kind == 5:
        value = w.key(pos, "execution_token")
        row[A] = w.opt_uint(value, 1, U64_MAX, A)
        return w.skip(value)
    if order_nil:
        raise _Slow
    (mode, due), end = w.fields(pos, ("mode", "new_due_at"))
    row[A], row[B] = w.uint(mode, 0, 1), w.uint(due, at, at)
    return end


def _check(p: bytes, row: list[int]) -> bool:
    if len(p) <= PREFIX or p[:16] == bytes(16):
        return False
    kind = p[16]
    expected, revision, at = (int.from_bytes(p[i:i + 8], "big") for i in (17, 25, 33))
    if not 1 <= kind <= 6 or expected == U64_MAX or revision != expected + 1:
        return False
    if (expected == 0) != (kind == 1) or at > TIME_MAX:
        return False
    row[AT], row[EXPECTED], row[END], row[KIND] = at, expected, len(p), kind
    try:
        return _body(_Walker(p, row), kind) == len(p)
    except _Slow:
        return False


def mutations_scan(buf: Any, records: Sequence[tuple[int, int]], max_depth: int = 64,
                   max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat rows (``MUTATION_ROW`` ints per record) for ``(offset, length)`` slices."""
    return batch_rows(buf, records, (max_depth, max_nodes, max_binary), MUTATION_ROW,
                      lambda data: PREFIX if len(data) > PREFIX else 0, _check)
