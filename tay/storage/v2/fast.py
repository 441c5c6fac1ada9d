"""Native fast path for replaying Store-v2 records (storage.md §3.5, tay's (30,2)/(31,2)).

``decode_batch`` looks at a batch of epoch records in at most three native calls: (7,1)
snapshots through ``tay._native.snapshots_scan``, (8,1) mutations through
``mutations_scan``, and the Event-v1 payloads inside (31,2) attachments and (30,2) epoch
events through ``events_scan``. For every record the scans vouch for it
builds what the exact decoders (``records.decode_snapshot``, ``epoch_records``) would
return; every other record, including each one that will be refused, is ``None`` and the
caller decodes it with the exact decoder, so refusals keep their class, reason and offset.

With ``rows`` (a consumer that keeps terminal base jobs as rows, ``tay.storage.v2.rows``)
a terminal snapshot becomes a ``JobRow`` and a result attachment a ``ResultRow``: checked
the same, built only when first read.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from tay import _native
from tay._native import _pure_events as er
from tay._native import _pure_mutations as mr
from tay._native import _pure_snapshots as sr
from tay.storage import events as ev
from tay.storage.events import epoch_carry
from tay.storage.events.fast import _FAST_BUILDERS, FAST_PAIRS
from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.epoch_records import EPOCH_EVENT_PAIR, JOB_ATTACHMENT_PAIR, EpochEvent
from tay.storage.v2.records import MUTATION_PAIR, SNAPSHOT_PAIR, Mutation
from tay.storage.v2.rows import job_row, result_row, snapshot_job

Record = tuple[int, int, int, int]  # payload offset, length, type, schema
_REVISION = struct.Struct(">Q")
_TERMINAL = frozenset(index for index, name in enumerate(sr.STATES)
                      if name in ("completed", "cancelled", "discarded"))
_RESULT = ev.RESULT_RECORDED


def _carried(attachment: bool) -> dict[tuple[int, int], Any]:
    """Inner pairs the Event-v1 scan decodes that may appear in the record, with their carry."""
    out = {}
    for pair in FAST_PAIRS:
        carry = epoch_carry(pair)
        if pair[0] in _FAST_BUILDERS and carry is not None and (carry.attachment or not attachment):
            out[pair] = carry
    return out


_ATTACHED = _carried(attachment=True)
_CARRIED = _carried(attachment=False)


def decode_batch(buffer: Any, records: list[Record], limits: DecodeLimits,
                 rows: bool = False) -> list[Any]:
    """One decoded object per record (for a snapshot the JobState ``job_of`` gives, a
    Mutation, the attachment's Event, an EpochEvent) or None where the exact decoder must
    look (a slow record, another pair). ``rows``: a terminal snapshot is a ``JobRow`` and a
    result attachment a ``ResultRow`` instead."""
    out: list[Any] = [None] * len(records)
    snapshots: list[int] = []
    mutations: list[int] = []
    inner: list[int] = []
    inner_records: list[Record] = []
    for index, (offset, length, rtype, schema) in enumerate(records):
        pair = (rtype, schema)
        if pair == MUTATION_PAIR:
            mutations.append(index)
        elif pair == SNAPSHOT_PAIR:
            snapshots.append(index)
        elif pair == JOB_ATTACHMENT_PAIR and length >= 2:
            inner_pair = (buffer[offset], buffer[offset + 1])
            if inner_pair in _ATTACHED:
                inner.append(index)
                inner_records.append((offset + 2, length - 2, *inner_pair))
        elif pair == EPOCH_EVENT_PAIR and length >= 10:
            inner_pair = (buffer[offset], buffer[offset + 1])
            if inner_pair in _CARRIED:
                inner.append(index)
                inner_records.append((offset + 10, length - 10, *inner_pair))
    if snapshots:
        _snapshots(buffer, records, snapshots, limits, out, rows)
    if mutations:
        _mutations(buffer, records, mutations, limits, out)
    if inner:
        _inner_events(buffer, records, inner, inner_records, limits, out, rows)
    return out


def _snapshots(buffer: Any, records: list[Record], indexes: list[int], limits: DecodeLimits,
               out: list[Any], lazy: bool) -> None:
    rows = _native.snapshots_scan(buffer, [records[i][:2] for i in indexes],
                                  limits.depth, limits.nodes, limits.binary)
    texts: dict[bytes, str] = {}  # queue and worker keys repeat: one str each
    base = 0
    for index in indexes:
        if rows[base] == er.EVENT_FAST:
            offset, length = records[index][:2]
            data = bytes(buffer[offset:offset + length])
            if lazy and rows[base + sr.STATE] in _TERMINAL \
                    and (rows[base + sr.NIL] >> sr.ORDER) & 1:
                out[index] = job_row(data, rows, base, texts, limits)
            else:
                out[index] = snapshot_job(data, rows, base, texts)
        base += sr.SNAPSHOT_ROW


def _mutations(buffer: Any, records: list[Record], indexes: list[int], limits: DecodeLimits,
               out: list[Any]) -> None:
    """The Mutation ``decode_mutation`` returns, for each payload the scan vouched for."""
    rows = _native.mutations_scan(buffer, [records[i][:2] for i in indexes],
                                  limits.depth, limits.nodes, limits.binary)
    builders: dict[int, Callable] = _FAST_BUILDERS
    base = 0
    for index in indexes:
        if rows[base] == er.EVENT_FAST:
            offset, length = records[index][:2]
            data = bytes(buffer[offset:offset + length])
            kind = rows[base + mr.KIND]
            expected = rows[base + er.EXPECTED]
            order = None if (rows[base + er.NIL] >> mr.ORDER) & 1 else rows[base + mr.ORDER]
            event = builders[kind](kind, 1, data, rows, base, False)
            out[index] = Mutation(data[:16], kind, expected, expected + 1, rows[base + er.AT],
                                  order, event)
        base += mr.MUTATION_ROW


def _inner_events(buffer: Any, records: list[Record], indexes: list[int],
                  inner_records: list[Record], limits: DecodeLimits, out: list[Any],
                  lazy: bool) -> None:
    rows = _native.events_scan(buffer, inner_records, limits.depth, limits.nodes,
                               limits.binary)
    builders: dict[int, Callable] = _FAST_BUILDERS
    base = 0
    for index, (offset, length, itype, ischema) in zip(indexes, inner_records):
        if rows[base] == er.EVENT_FAST:
            if lazy and (itype, ischema) == _RESULT \
                    and records[index][2:] == JOB_ATTACHMENT_PAIR:
                start = offset - 2  # the (31,2) payload: its inner pair, then the event
                out[index] = result_row(bytes(buffer[start:offset + length]), rows, base, 2,
                                        limits)
                base += er.EVENT_ROW
                continue
            event = builders[itype](itype, ischema, bytes(buffer[offset:offset + length]),
                                    rows, base)
            if records[index][2:] == JOB_ATTACHMENT_PAIR:
                out[index] = event
            else:
                start = records[index][0]
                (revision,) = _REVISION.unpack_from(buffer, start + 2)
                if revision != 0 and event.get("expected_revision", 0) < revision:
                    out[index] = EpochEvent(event, revision, _CARRIED[(itype, ischema)])
        base += er.EVENT_ROW
