"""Fast-path decoding of Event-v1 payloads from ``tay._native.events_scan`` rows.

``decode_event`` / ``decode_events`` build events straight from the native scan's slots
when it vouches for a payload; anything else (including every payload that will be
refused) goes through ``event_registry.decode_event_exact``, the reference decoder.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

from tay import _native
from tay._native import _pure_events as slots
from tay.storage.formats import value
from tay.storage.events.definition import CHECKED_LIMITS, LazyDefinition
from tay.storage.events.registry import (
    DAY_TOTALS, FAILURE_RECORDED, JOB_DELETED, JOB_EXPEDITED, JOB_PAIRS, JOB_REQUEUED, Event,
    decode_event_exact, event_with_raw,
)
from tay.storage.events.v1 import diagnostic

_DEFAULT_LIMITS = value.DecodeLimits()
# the pairs the native scan decodes: the job lifecycle, its result, a failure's details,
# an operator's job steps (requeue, expedite, deletion) and a day's totals (the server
# writes one a minute)
JOB_STEP_NAMES = {JOB_REQUEUED: "job_requeued", JOB_EXPEDITED: "job_expedited",
                  JOB_DELETED: "job_deleted"}
FAST_PAIRS = frozenset(JOB_PAIRS | {FAILURE_RECORDED, DAY_TOTALS} | set(JOB_STEP_NAMES))


def decode_event(
    event_type: int, schema: int, payload: bytes | memoryview,
    limits: value.DecodeLimits | None = None,
) -> Event:
    """Decode and check one event payload (pair, Value, payload-local rules).

    Well-formed Event-v1 payloads take the native fast path; anything else (including
    every payload that will be refused) goes through ``decode_event_exact``.
    """
    if (event_type, schema) in FAST_PAIRS:
        limits = limits if limits is not None else _DEFAULT_LIMITS
        row = _native.events_scan(payload, ((0, len(payload), event_type, schema),),
                                  limits.depth, limits.nodes, limits.binary)
        if row[0] == slots.EVENT_FAST:
            return _FAST_BUILDERS[event_type](event_type, schema, bytes(payload), row, 0)
    return decode_event_exact(event_type, schema, payload, limits)


def decode_events(
    buffer: Any, records: list[tuple[int, int, int, int]],
    limits: value.DecodeLimits | None = None,
) -> Iterator[Event]:
    """Decode ``(payload_offset, length, type, schema)`` slices of ``buffer`` in order.

    One native call checks the whole batch; records it cannot vouch for are decoded (and
    refused) by ``decode_event_exact`` when the iteration reaches them, so a caller that
    applies events as they come sees exactly the sequential behaviour.
    """
    limits = limits if limits is not None else _DEFAULT_LIMITS
    rows = _native.events_scan(buffer, records, limits.depth, limits.nodes, limits.binary)
    if not records:
        return
    # one copy of the batch's span, then cheap bytes slices (no memoryview per record)
    low = min(offset for offset, _, _, _ in records)
    high = max(offset + length for offset, length, _, _ in records)
    block = bytes(buffer[low:high])
    width, fast, builders = slots.EVENT_ROW, slots.EVENT_FAST, _FAST_BUILDERS
    base = 0
    for offset, length, event_type, schema in records:
        data = block[offset - low:offset - low + length]
        if rows[base] == fast:
            yield builders[event_type](event_type, schema, data, rows, base)
        else:
            yield decode_event_exact(event_type, schema, data, limits)
        base += width


_SCALARS = (None, False, True)  # tags 00, 01, 02: the only one-byte Values
_make = event_with_raw  # the replay hot path builds its events without the dataclass init
# Builders: (type, schema, data, row, base, raw=True) -> Event; ``raw=False`` when ``data``
# is not the event's own payload (a Store-v2 mutation stands for the event).


def _nil(row: list[int], base: int, slot: int) -> bool:
    return bool((row[base + slots.NIL] >> slot) & 1)


def _common_fields(data: bytes, row: list[int], base: int) -> dict[str, Any]:
    job_id = row[base + slots.JOB_ID]
    return {"at": row[base + slots.AT], "expected_revision": row[base + slots.EXPECTED],
            "job_id": data[job_id:job_id + 16]}


def _text(data: bytes, row: list[int], base: int, slot: int) -> str:
    start = row[base + slot]
    return data[start:start + row[base + slot + 1]].decode("utf-8")


def _fast_inserted(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    start = row[base + slots.DEFINITION]
    args = row[base + slots.ARGS] - start
    definition = LazyDefinition(
        data[start:start + row[base + slots.DEFINITION_LENGTH]],
        (args, args + row[base + slots.ARGS_LENGTH]), row[base + slots.ARGS_NODES],
        row[base + slots.MAX_ATTEMPTS],
        _text(data, row, base, slots.QUEUE),
        None if _nil(row, base, slots.SCHEDULED_AT) else row[base + slots.SCHEDULED_AT],
        row[base + slots.TIMEOUT_MS], _text(data, row, base, slots.WORKER))
    payload = _common_fields(data, row, base)
    payload["definition"] = definition
    payload["eligible_at"] = row[base + slots.A]
    return _make(event_type, schema, "job_inserted", MappingProxyType(payload),
                 data if raw else None)


def _fast_available(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    payload["due_at"] = row[base + slots.A]
    return _make(event_type, schema, "job_available", MappingProxyType(payload),
                 data if raw else None)


def _fast_started(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    payload["attempt"] = row[base + slots.A]
    payload["cycle_token"] = row[base + slots.B]
    return _make(event_type, schema, "job_started", MappingProxyType(payload),
                 data if raw else None)


def _fast_finished(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    payload["diagnostic"] = None if _nil(row, base, slots.D) else diagnostic(row[base + slots.D])
    payload["disposition"] = row[base + slots.B]
    payload["execution_token"] = row[base + slots.A]
    payload["next_attempt"] = None if _nil(row, base, slots.E) else row[base + slots.E]
    payload["next_due_at"] = None if _nil(row, base, slots.F) else row[base + slots.F]
    payload["outcome"] = row[base + slots.C]
    return _make(event_type, schema, "job_finished", MappingProxyType(payload),
                 data if raw else None)


def _fast_cancelled(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    payload["execution_token"] = None if _nil(row, base, slots.A) else row[base + slots.A]
    return _make(event_type, schema, "job_cancelled", MappingProxyType(payload),
                 data if raw else None)


def _fast_retried(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    payload["mode"] = row[base + slots.A]
    payload["new_due_at"] = row[base + slots.B]
    return _make(event_type, schema, "job_retried", MappingProxyType(payload),
                 data if raw else None)


def _fast_result(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    payload = _common_fields(data, row, base)
    start = row[base + slots.A]
    length = row[base + slots.B]
    # already checked canonical and within budget as part of the whole payload; the
    # commonest results (nil, a boolean) need no decoder call
    payload["result"] = _SCALARS[data[start]] if length == 1 else \
        value.decode(memoryview(data)[start:start + length], CHECKED_LIMITS)
    return _make(event_type, schema, "result_recorded", MappingProxyType(payload),
                 data if raw else None)


def _fast_failure(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                  raw: bool = True) -> Event:
    """The exact decoder's failure_recorded: its keys and the error's in canonical order."""
    nil = row[base + slots.NIL]
    error = {}
    for name, slot in slots.ERROR_TEXT_SLOTS:
        if not (nil >> slot) & 1:
            start = row[base + slot]
            error[name] = data[start:start + row[base + slot + 1]].decode("utf-8")
    job_id = row[base + slots.JOB_ID]
    payload = {"at": row[base + slots.AT], "error": error,
               "expected_revision": row[base + slots.EXPECTED],
               "job_id": data[job_id:job_id + 16]}
    return _make(event_type, schema, "failure_recorded", MappingProxyType(payload),
                 data if raw else None)


def _fast_job_step(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                   raw: bool = True) -> Event:
    """An operator's requeue, expedite or deletion: the job step's three fields."""
    return _make(event_type, schema, JOB_STEP_NAMES[event_type, schema],
                 MappingProxyType(_common_fields(data, row, base)), data if raw else None)


def _fast_day_totals(event_type: int, schema: int, data: bytes, row: list[int], base: int,
                     raw: bool = True) -> Event:
    """A day's totals: its five fields, in the exact decoder's (canonical) order."""
    payload = {"at": row[base + slots.AT], "completed": row[base + slots.A],
               "day": row[base + slots.B], "enqueued": row[base + slots.C],
               "failed": row[base + slots.D]}
    return _make(event_type, schema, "day_totals", MappingProxyType(payload),
                 data if raw else None)


_FAST_BUILDERS: dict[int, Callable[[int, int, bytes, list[int], int], Event]] = {
    1: _fast_inserted, 2: _fast_available, 3: _fast_started, 4: _fast_finished,
    5: _fast_cancelled, 6: _fast_retried, 10: _fast_result, 22: _fast_failure,
    **{pair[0]: _fast_job_step for pair in JOB_STEP_NAMES}, DAY_TOTALS[0]: _fast_day_totals,
}
