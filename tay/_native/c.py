"""The C-backed twin: thin wrappers that marshal whole batches into ``csrc/`` calls.

Importing this module raises ImportError when the cffi extension is not built. Every
function has the same signature and results as its twin in ``tay._native.pure``. The
Value *encoder* stays in Python (C cannot read Python objects without Python.h, and
flattening objects for C would cost more than writing the bytes); the decoder validates in
C and builds objects from the C node tape.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from typing import Any, Sequence

from tay._native._pure_value import check_limits
from tay._native._pure_value import value_encode as value_encode
from tay._native._tay_native import ffi, lib  # ImportError when not built
from tay._native.errors import DECODE_REASONS, ValueCodecError
from tay._native.checks import check_apply_input, check_record_fields, check_scan_bounds

IMPLEMENTATION = "c"
_CRC_NAMES = {lib.TAY_CRC_SOFTWARE: "software", lib.TAY_CRC_SSE42: "sse4.2",
              lib.TAY_CRC_ARMV8: "armv8"}
CRC32C_IMPLEMENTATION = _CRC_NAMES[
    lib.tay_crc32c_select(1 if os.environ.get("TAY_CRC32C_SOFTWARE", "") not in ("", "0") else 0)
]

_SCAN_STOPS = {lib.TAY_SCAN_END: "end", lib.TAY_SCAN_NOT_RECORD: "not_record",
               lib.TAY_SCAN_BAD_RECORD: "bad_record", lib.TAY_SCAN_SEQUENCE: "sequence"}
_FRAME_ERRORS = {lib.TAY_FRAME_OK: None, lib.TAY_FRAME_TOO_LARGE: "frame_too_large",
                 lib.TAY_FRAME_EMPTY: "empty_frame"}
_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)  # C overwrites every byte
_CHUNK = 65536  # result rows per C call: bounds the scratch arrays, not the scan


def crc32c(data: Any, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from the finalized CRC ``value``."""
    if type(data) is bytes:  # the common case: no buffer object needed
        return lib.tay_crc32c_chars(value & 0xFFFFFFFF, data, len(data))
    buf = ffi.from_buffer("uint8_t[]", data)
    return lib.tay_crc32c(value & 0xFFFFFFFF, buf, len(buf))


def encode_records(records: Sequence[tuple[int, int, int, Any]]) -> bytes:
    """Concatenated Record v1 frames for ``(type, schema, sequence, payload)`` tuples."""
    if not records:
        return b""
    types, schemas, sequences, payloads = zip(*records)
    lengths = [len(p) if type(p) is bytes else memoryview(p).nbytes for p in payloads]
    try:
        c_types = ffi.new("int64_t[]", types)
        c_schemas = ffi.new("int64_t[]", schemas)
        c_sequences = ffi.new("uint64_t[]", sequences)
    except (OverflowError, TypeError):
        # A value C cannot even hold: let the Python checks name the record and field.
        for index, (rtype, schema, sequence, _) in enumerate(records):
            check_record_fields(index, rtype, schema, sequence, lengths[index])
        raise
    blob = b"".join(payloads)
    total = len(blob) + 28 * len(records)
    out = _new_uncleared("uint8_t[]", total)
    error_index = ffi.new("size_t *")
    rc = lib.tay_encode_records(len(records), c_types, c_schemas, c_sequences,
                                ffi.new("uint64_t[]", lengths), ffi.from_buffer("uint8_t[]", blob), out,
                                total, error_index)
    if rc != 0:
        index = error_index[0]
        rtype, schema, sequence, _ = records[index]
        check_record_fields(index, rtype, schema, sequence, lengths[index])
        raise ValueError(f"record {index}: refused by the encoder (code {rc})")
    return ffi.buffer(out)[:]


def scan_records(
    buf: Any, start: int, end: int, budget: int, first_sequence: int
) -> tuple[list[tuple[int, int, int, int, int]], int, str]:
    """Walk Record v1 frames in ``buf[start:end]``; see ``tay._native.pure.scan_records``."""
    data = ffi.from_buffer("uint8_t[]", buf)
    check_scan_bounds(len(data), start, end, budget, first_sequence)
    capacity = min((end - start) // 28 + 1, _CHUNK)
    offsets, sequences = ffi.new("uint64_t[]", capacity), ffi.new("uint64_t[]", capacity)
    types, schemas = ffi.new("uint8_t[]", capacity), ffi.new("uint8_t[]", capacity)
    lengths = ffi.new("uint32_t[]", capacity)
    count, stop_offset = ffi.new("size_t *"), ffi.new("size_t *")
    records: list[tuple[int, int, int, int, int]] = []
    offset = start
    while True:
        code = lib.tay_scan_records(data, offset, end, budget, first_sequence + len(records),
                                    capacity, offsets, types, schemas, sequences, lengths,
                                    count, stop_offset)
        found = count[0]
        records += zip(ffi.unpack(offsets, found), ffi.unpack(types, found),
                       ffi.unpack(schemas, found), ffi.unpack(sequences, found),
                       ffi.unpack(lengths, found))
        offset = stop_offset[0]
        if code != lib.TAY_SCAN_FULL:
            return records, offset, _SCAN_STOPS[code]
        if first_sequence + len(records) > 0xFFFFFFFFFFFFFFFF:
            return records, offset, "sequence"  # no frame can carry the next sequence


def scan_record_columns(
    buf: Any, start: int, end: int, budget: int, first_sequence: int
) -> tuple[array, bytes, bytes, array, int, str]:
    """``scan_records`` as columns; see ``tay._native.pure.scan_record_columns``."""
    data = ffi.from_buffer("uint8_t[]", buf)
    check_scan_bounds(len(data), start, end, budget, first_sequence)
    offsets, sequences, types, schemas, lengths = _scan_scratch()
    count, stop_offset = ffi.new("size_t *"), ffi.new("size_t *")
    out_offsets, out_lengths = array("Q"), array("I")
    out_types, out_schemas = bytearray(), bytearray()
    offset = start
    while True:
        code = lib.tay_scan_records(data, offset, end, budget,
                                    first_sequence + len(out_offsets), _CHUNK, offsets, types,
                                    schemas, sequences, lengths, count, stop_offset)
        found = count[0]
        out_offsets.frombytes(ffi.buffer(offsets, 8 * found))
        out_lengths.frombytes(ffi.buffer(lengths, 4 * found))
        out_types += ffi.buffer(types, found)
        out_schemas += ffi.buffer(schemas, found)
        offset = stop_offset[0]
        if code != lib.TAY_SCAN_FULL:
            stop = _SCAN_STOPS[code]
            break
        if first_sequence + len(out_offsets) > 0xFFFFFFFFFFFFFFFF:
            stop = "sequence"  # no frame can carry the next sequence
            break
    return out_offsets, bytes(out_types), bytes(out_schemas), out_lengths, offset, stop


_scan_cache: list = []


def _scan_scratch() -> tuple:
    """The five result columns of one ``tay_scan_records`` call (allocated once, reused)."""
    if not _scan_cache:
        _scan_cache.extend(_new_uncleared(kind, _CHUNK) for kind in (
            "uint64_t[]", "uint64_t[]", "uint8_t[]", "uint8_t[]", "uint32_t[]"))
    return tuple(_scan_cache)


def split_frames(buf: Any, max_frame: int) -> tuple[list[tuple[int, int]], int, str | None]:
    """Split length-prefixed frames: ``(payload slices, bytes consumed, error or None)``."""
    data = ffi.from_buffer("uint8_t[]", buf)
    capacity = min(len(data) // 5 + 1, _CHUNK)
    starts, ends = ffi.new("uint64_t[]", capacity), ffi.new("uint64_t[]", capacity)
    count, consumed = ffi.new("size_t *"), ffi.new("size_t *")
    frames: list[tuple[int, int]] = []
    offset = 0
    limit = max(0, min(max_frame, 0xFFFFFFFF))
    while True:
        view = data + offset
        code = lib.tay_split_frames(view, len(data) - offset, limit, capacity, starts, ends,
                                    count, consumed)
        found = count[0]
        frames += ((offset + s, offset + e) for s, e in
                   zip(ffi.unpack(starts, found), ffi.unpack(ends, found)))
        offset += consumed[0]
        if code != lib.TAY_FRAME_FULL:
            return frames, offset, _FRAME_ERRORS[code]


_SPANS = struct.Struct(f"={lib.TAY_FRAME_FIELDS}Q").unpack_from  # tay_frame_scan.fields: a row
_ROW_BYTES = 8 * lib.TAY_FRAME_FIELDS
_HEAD = struct.Struct(f"={lib.TAY_FRAME_SCAN_HEAD}Q").unpack_from  # tay_frame_scan.head
_scan_split = lib.tay_frame_scan_split  # looked up once: called per read
_FRAME_FULL = lib.TAY_FRAME_FULL
_ENQUEUE = lib.TAY_ENQUEUE
# an enqueue's plain durability (fields[9]), TAY_ENQUEUE_CANONICAL more when its args text
# is canonical (the last of its ids)
_DURABILITIES = (None, "persistent", "volatile") * 2
_CANONICAL = (False, False, False, True, True, True)
_SCAN_ROWS = lib.TAY_FRAME_SCAN_ROWS


class FrameScan:
    """``split_frames_marked`` with its limits set once: one ``tay_frame_scan`` per decoder
    (made here, limits and result columns), so a read passes one pointer to C."""

    __slots__ = ("_scan", "_starts", "_ends", "_marks", "_spans", "_head")

    def __init__(self, max_frame: int, max_depth: int, max_nodes: int,
                 max_key_bytes: int) -> None:
        scan = self._scan = _new_uncleared("tay_frame_scan *")
        try:  # cffi refuses a value outside its unsigned field (OverflowError)
            scan.max_frame, scan.max_depth = max_frame, max_depth
            scan.max_nodes, scan.max_key_bytes = max_nodes, max_key_bytes
        except OverflowError:
            raise ValueError("limits out of range") from None
        self._starts, self._ends, self._marks = scan.starts, scan.ends, scan.marks
        self._spans = ffi.buffer(scan.fields)
        self._head = ffi.buffer(scan.head)

    def split(self, buf: Any) -> tuple[list[tuple[int, int, int, Any]], int, str | None]:
        """``split_frames_marked(buf, *limits)`` (a decoder's common read, whole frames, goes
        through ``payloads``; this serves the read that completes a partial frame)."""
        data = base = buf if type(buf) is bytes else ffi.from_buffer("uint8_t[]", buf)
        size = len(data)
        return self._split_all(buf, base, size, _scan_split(self._scan, data, size))

    def payloads(self, buf: Any) -> tuple[list[tuple[Any, int, Any]], int, str | None]:
        """``split`` with each frame as ``(payload, mark, ids)``, the payload sliced from
        ``buf``: what a decoder hands on, built once instead of from ``split``'s rows."""
        scan = self._scan
        data = base = buf if type(buf) is bytes else ffi.from_buffer("uint8_t[]", buf)
        size = len(data)
        _scan_split(scan, data, size)
        # the call's summary in one unpack (tay_frame_scan.head): a cffi field or item read
        # costs about as much as this whole unpack, and one whole frame is the common read
        code, count, consumed, start, end, mark, a, b, c, d, e, f, g, h, r, u, q, z = \
            _HEAD(self._head)
        if count == 1 and code != _FRAME_FULL:
            if mark < 2:
                return [(buf[start:end], mark, None)], consumed, _FRAME_ERRORS[code]
            if mark == _ENQUEUE:  # request_id and task are ASCII; args and options JSON text
                return ([(buf[start:end], mark, (
                    buf[a:b].decode(), buf[c:d].decode(), buf[e:f], buf[g:h] if g != h else None,
                    (r - 1, buf[q:z].decode() if q != z else None, _DURABILITIES[u])
                    if r else None, _CANONICAL[u]))], consumed, _FRAME_ERRORS[code])
            text = str(buf, "latin-1")  # a report is ASCII: one char a byte
            return ([(buf[start:end], mark, (text[a:b], text[c:d], text[e:f]))],
                    consumed, _FRAME_ERRORS[code])
        frames, consumed, error = self._split_all(buf, base, size, code)
        return [(buf[start:end], mark, ids) for start, end, mark, ids in frames], consumed, error

    def _split_all(self, buf: Any, base: Any, size: int,
                   code: int) -> tuple[list[tuple[int, int, int, Any]], int, str | None]:
        """Every row of a scan just made (``code`` its result), and more calls while the
        rows were full."""
        scan = self._scan
        starts, ends, marks = self._starts, self._ends, self._marks
        frames: list[tuple[int, int, int, Any]] = []
        offset = 0
        text = None  # the buffer as latin-1 text, made once
        while True:
            for index in range(scan.count):
                mark = marks[index]
                if mark < 2:
                    frames.append((offset + starts[index], offset + ends[index], mark, None))
                    continue
                a, b, c, d, e, f, g, h, r, u, q, z = _SPANS(self._spans, _ROW_BYTES * index)
                if offset:
                    a, b, c, d, e, f, g, h, q, z = (
                        x + offset for x in (a, b, c, d, e, f, g, h, q, z))
                if mark == _ENQUEUE:
                    ids = (bytes(buf[a:b]).decode(), bytes(buf[c:d]).decode(), bytes(buf[e:f]),
                           bytes(buf[g:h]) if g != h else None,
                           (r - 1, bytes(buf[q:z]).decode() if q != z else None,
                            _DURABILITIES[u]) if r else None, _CANONICAL[u])
                else:
                    if text is None:
                        text = str(buf, "latin-1")
                    ids = (text[a:b], text[c:d], text[e:f])
                frames.append((offset + starts[index], offset + ends[index], mark, ids))
            offset += scan.consumed
            if code != _FRAME_FULL:
                return frames, offset, _FRAME_ERRORS[code]
            if base is buf:  # more than a scan's rows of frames in bytes: go on through a view
                base = ffi.from_buffer("uint8_t[]", buf)
            code = _scan_split(scan, base + offset, size - offset)


def split_frames_marked(buf: Any, max_frame: int, max_depth: int, max_nodes: int,
                        max_key_bytes: int) -> tuple[list[tuple[int, int, int, Any]], int,
                                                     str | None]:
    """``split_frames``, each frame ``(start, end, mark, ids)``: mark 0 (check it the exact
    way), 1 (clean: ``json_domain_clean``), 2 or 3 (a clean ``started`` / ``succeeded``
    report read by csrc/frames_check.c) with ids (request_id, reservation_id, execution_id)
    as str. A decoder keeps a ``FrameScan`` instead (its limits set once)."""
    return FrameScan(max_frame, max_depth, max_nodes, max_key_bytes).split(buf)


def json_report(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(mark, spans)`` of one payload (see ``tay._native.pure.json_report``)."""
    fields = ffi.new("uint64_t[6]")
    mark = lib.tay_json_report(ffi.from_buffer("uint8_t[]", json), len(json), fields)
    return (mark, tuple(fields)) if mark else (0, ())


def json_enqueue(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(mark, spans)`` of one payload (see ``tay._native.pure.json_enqueue``)."""
    fields = ffi.new("uint64_t[12]")
    mark = lib.tay_json_enqueue(ffi.from_buffer("uint8_t[]", json), len(json), fields)
    return (mark, tuple(fields)) if mark else (0, ())


def json_enqueued(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(mark, spans)`` of one ``enqueued`` reply (see ``tay._native.pure.json_enqueued``)."""
    fields = ffi.new("uint64_t[6]")
    mark = lib.tay_json_enqueued(json if type(json) is bytes else ffi.from_buffer("uint8_t[]", json), len(json), fields)
    return (mark, tuple(fields)) if mark else (0, ())


def json_plain_string_end(json: Any, at: int) -> int:
    """The offset after the plain string opened at ``json[at]``, else 0 (see
    ``tay._native.pure.json_plain_string_end``)."""
    data = json if type(json) is bytes else ffi.from_buffer("uint8_t[]", json)
    return lib.tay_json_plain_string_end(data, len(json), at)


def json_canonical(json: Any) -> bool:
    """Whether ``json`` is an object written exactly as orjson writes it sorted, for sure
    (see ``tay._native.pure.json_canonical``)."""
    data = json if type(json) is bytes else ffi.from_buffer("uint8_t[]", json)
    return lib.tay_json_canonical(data, len(json)) == 1


def json_domain_clean(json: Any, max_depth: int, max_nodes: int, max_key_bytes: int) -> bool:
    """Whether ``json``, if valid JSON, is an object within the value-domain bounds for sure."""
    data = json if type(json) is bytes else ffi.from_buffer("uint8_t[]", json)  # bytes pass as they are
    return lib.tay_json_domain_clean(data, len(json), max_depth, max_nodes, max_key_bytes) == 1


def json_member_count(json: Any) -> int:
    """Colons outside strings of a valid JSON text: the members of all its objects."""
    return lib.tay_json_member_count(ffi.from_buffer("uint8_t[]", json), len(json))


def value_decode(
    buf: Any, max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
) -> Any:
    """Decode exactly one Value filling all of ``buf``; raise ValueCodecError otherwise."""
    check_limits(max_depth, max_nodes, max_binary)
    data = buf if isinstance(buf, bytes) else bytes(buf)
    capacity = max(1, min(len(data), max_nodes))
    if capacity <= _EVENT_TAPE:  # this thread's tape (a replay decodes thousands of events)
        tags, values, offsets, reals = _event_tape()
        node_count, error_offset = _decode_counts()
    else:
        new = _new_uncleared  # the scan writes every node it reports; only those are read
        tags, values = new("uint8_t[]", capacity), new("uint64_t[]", capacity)
        offsets, reals = new("uint32_t[]", capacity), new("double[]", capacity)
        node_count, error_offset = ffi.new("size_t *"), ffi.new("size_t *")
    rc = lib.tay_value_scan(ffi.from_buffer("uint8_t[]", data), len(data), max_depth,
                            max_nodes, max_binary, capacity, tags, values, offsets, reals,
                            node_count, error_offset)
    if rc < 0:
        if -rc == lib.TAY_V_TAPE_FULL:  # impossible: every node takes at least one byte
            raise RuntimeError("value tape overflow")
        raise ValueCodecError(DECODE_REASONS[-rc - 1], error_offset[0])
    count = node_count[0]
    return _TapeReader(data, ffi.unpack(tags, count), ffi.unpack(values, count),
                       ffi.unpack(offsets, count), reals).read()


class _TapeReader:
    """Turns a validated pre-order tape into Python objects (no checks left to do)."""

    __slots__ = ("data", "tags", "values", "offsets", "reals", "next")

    def __init__(self, data: bytes, tags: list, values: list, offsets: list, reals: Any):
        self.data, self.tags, self.values = data, tags, values
        self.offsets, self.reals, self.next = offsets, reals, 0

    def read(self) -> Any:
        index = self.next
        self.next = index + 1
        tag = self.tags[index]
        if tag == 0x06:
            start = self.offsets[index]
            return self.data[start : start + self.values[index]].decode("utf-8")
        if tag == 0x09:
            read = self.read
            result = {}
            for _ in range(self.values[index]):
                key = read()
                result[key] = read()
            return result
        if tag == 0x04:
            return self.values[index]
        if tag <= 0x02:
            return (None, False, True)[tag]
        if tag == 0x07:
            start = self.offsets[index]
            return self.data[start : start + self.values[index]]
        if tag == 0x08:  # a binary item (a list of job ids) read in place: no call
            read, tags, offsets, values, data = self.read, self.tags, self.offsets, \
                self.values, self.data
            items = []
            for _ in range(values[index]):
                at = self.next
                if tags[at] == 0x07:
                    self.next = at + 1
                    start = offsets[at]
                    items.append(data[start:start + values[at]])
                else:
                    items.append(read())
            return items
        if tag == 0x03:
            return self.values[index] - (1 << 64)
        return self.reals[index]


def events_scan(buf: Any, records: Sequence[tuple[int, int, int, int]], max_depth: int = 64,
                max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat Event-v1 fast-path rows; see ``tay._native._pure_events.events_scan``."""
    check_limits(max_depth, max_nodes, max_binary)
    count = len(records)
    if not count:
        return []
    data = ffi.from_buffer("uint8_t[]", buf)
    offsets_list, lengths_list, types_list, schemas_list = zip(*records)
    for offset, length in zip(offsets_list, lengths_list):
        if offset < 0 or length < 0 or offset + length > len(data):
            raise ValueError(f"payload slice {offset}+{length} outside the buffer")
    lengths_list = [min(length, 0xFFFFFFFF) for length in lengths_list]
    small = [t if 0 <= t <= 255 else 0 for t in types_list]
    schemas = [s if 0 <= s <= 255 else 0 for s in schemas_list]
    tape = _event_tape()
    rows = _new_uncleared("uint64_t[]", count * lib.TAY_EVENT_ROW)
    lib.tay_events_scan(data, count, ffi.new("uint64_t[]", offsets_list),
                        ffi.new("uint32_t[]", lengths_list), ffi.new("uint8_t[]", small),
                        ffi.new("uint8_t[]", schemas), max_depth, max_nodes, max_binary,
                        _EVENT_TAPE, *tape, rows)
    return ffi.unpack(rows, count * lib.TAY_EVENT_ROW)


def snapshots_scan(buf: Any, records: Sequence[tuple[int, int]], max_depth: int = 64,
                   max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat (7,1) snapshot rows; see ``tay._native._pure_snapshots.snapshots_scan``."""
    return _rows_scan(lib.tay_snapshots_scan, lib.TAY_SNAPSHOT_ROW, buf, records,
                      max_depth, max_nodes, max_binary)


def mutations_scan(buf: Any, records: Sequence[tuple[int, int]], max_depth: int = 64,
                   max_nodes: int = 100_000, max_binary: int = 16_777_216) -> list[int]:
    """Flat (8,1) mutation rows; see ``tay._native._pure_mutations.mutations_scan``."""
    return _rows_scan(lib.tay_mutations_scan, lib.TAY_MUTATION_ROW, buf, records,
                      max_depth, max_nodes, max_binary)


def _rows_scan(scan: Any, width: int, buf: Any, records: Sequence[tuple[int, int]],
               max_depth: int, max_nodes: int, max_binary: int) -> list[int]:
    """One native call over ``(offset, length)`` payload slices, ``width`` u64s per row."""
    check_limits(max_depth, max_nodes, max_binary)
    count = len(records)
    if not count:
        return []
    data = ffi.from_buffer("uint8_t[]", buf)
    offsets_list, lengths_list = zip(*records)
    for offset, length in records:
        if offset < 0 or length < 0 or offset + length > len(data):
            raise ValueError(f"payload slice {offset}+{length} outside the buffer")
    rows = _new_uncleared("uint64_t[]", count * width)
    scan(data, count, ffi.new("uint64_t[]", offsets_list),
         ffi.new("uint32_t[]", [min(n, 0xFFFFFFFF) for n in lengths_list]),
         max_depth, max_nodes, max_binary, _EVENT_TAPE, *_event_tape(), rows)
    return ffi.unpack(rows, count * width)


def base_jobs(buf: Any, offsets: Any, lengths: Any, types: Any, schemas: Any, start: int,
              stop: int, last_id: bytes | None, max_depth: int = 64, max_nodes: int = 100_000,
              max_binary: int = 16_777_216, take_live: bool = False,
              open_end: bool = False) -> tuple[int, array, array]:
    """A base's finished jobs as columns; see ``tay._native._pure_base.base_jobs``.
    ``offsets`` (u64), ``lengths`` (u32), ``types`` and ``schemas`` (bytes) are the record
    scan's columns (``RecordTable``), read in place."""
    check_limits(max_depth, max_nodes, max_binary)
    if not 0 <= start <= stop <= min(len(offsets), len(lengths), len(types), len(schemas)):
        raise ValueError(f"record range {start}..{stop} outside the columns")
    if last_id is not None and len(last_id) != 16:
        raise ValueError("last_id must be 16 bytes")
    count = stop - start
    if not count:
        return start, array("Q"), array("Q")
    data = ffi.from_buffer("uint8_t[]", buf)
    offset_column = _column("uint64_t[]", offsets, start, count)
    length_column = _column("uint32_t[]", lengths, start, count)
    jobs = _new_uncleared("uint64_t[]", count * lib.TAY_BASE_JOB)
    live = _new_uncleared("uint64_t[]", count * lib.TAY_BASE_LIVE) if take_live else ffi.NULL
    found, held = ffi.new("size_t *"), ffi.new("size_t *")
    taken = lib.tay_base_jobs(data, len(data), count, offset_column, length_column,
                              ffi.from_buffer("uint8_t[]", types) + start,
                              ffi.from_buffer("uint8_t[]", schemas) + start,
                              ffi.NULL if last_id is None else last_id, max_depth, max_nodes,
                              max_binary, _EVENT_TAPE, *_event_tape(), jobs, found,
                              1 if take_live else 0, live, held, 1 if open_end else 0)
    rows = array("Q")  # copied in one piece: no int object per field
    rows.frombytes(ffi.buffer(jobs, found[0] * lib.TAY_BASE_JOB * 8))
    live_rows = array("Q")
    if held[0]:
        live_rows.frombytes(ffi.buffer(live, held[0] * lib.TAY_BASE_LIVE * 8))
    if start:
        for slot in range(lib.TAY_BJ_RECORD, len(rows), lib.TAY_BASE_JOB):
            rows[slot] += start
        for slot in range(lib.TAY_BL_RECORD, len(live_rows), lib.TAY_BASE_LIVE):
            live_rows[slot] += start
    return start + taken, rows, live_rows


def tail_jobs(buf: Any, offsets: Any, lengths: Any, types: Any, schemas: Any, start: int,
              stop: int, next_order: int, max_depth: int = 64, max_nodes: int = 100_000,
              max_binary: int = 16_777_216) -> tuple[int, int, array, array, array,
                                                    tuple[int, int, int], array]:
    """A tail's common job lifecycles as columns; see ``tay._native._pure_tail.tail_jobs``.
    The record columns are read in place, as ``base_jobs`` reads them."""
    check_limits(max_depth, max_nodes, max_binary)
    if not 0 <= start <= stop <= min(len(offsets), len(lengths), len(types), len(schemas)):
        raise ValueError(f"record range {start}..{stop} outside the columns")
    if not 0 <= next_order < 2**64:
        raise ValueError("next_order must be a u64")
    count = stop - start
    if not count:
        return start, next_order, array("Q"), array("Q"), array("Q"), (0, 0, 0), array("Q")
    data = ffi.from_buffer("uint8_t[]", buf)
    jobs = _new_uncleared("uint64_t[]", count * lib.TAY_BASE_JOB)
    links = _new_uncleared("uint64_t[]", count * lib.TAY_TAIL_LINK)
    pending = _new_uncleared("uint64_t[]", count * 4)
    live = _new_uncleared("uint64_t[]", count * lib.TAY_TAIL_LIVE)
    order = ffi.new("uint64_t *", next_order)
    found = ffi.new("size_t[3]")
    totals = ffi.new("uint64_t[3]")
    taken = lib.tay_tail_jobs(data, len(data), count, _column("uint64_t[]", offsets, start, count),
                              _column("uint32_t[]", lengths, start, count),
                              ffi.from_buffer("uint8_t[]", types) + start,
                              ffi.from_buffer("uint8_t[]", schemas) + start, order, max_depth,
                              max_nodes, max_binary, _EVENT_TAPE, *_event_tape(), jobs, links,
                              found, pending, found + 1, totals, live, found + 2)
    if taken < 0:
        raise MemoryError("tay_tail_jobs: out of memory")
    rows, link_rows, waiting, held = array("Q"), array("Q"), array("Q"), array("Q")
    rows.frombytes(ffi.buffer(jobs, found[0] * lib.TAY_BASE_JOB * 8))
    link_rows.frombytes(ffi.buffer(links, found[0] * lib.TAY_TAIL_LINK * 8))
    waiting.frombytes(ffi.buffer(pending, found[1] * 4 * 8))
    held.frombytes(ffi.buffer(live, found[2] * lib.TAY_TAIL_LIVE * 8))
    if start:
        for slot in range(lib.TAY_BJ_RECORD, len(rows), lib.TAY_BASE_JOB):
            rows[slot] += start
        for slot in range(0, len(waiting), 4):
            waiting[slot] += start
        for slot in range(0, len(held), lib.TAY_TAIL_LIVE):
            for index in (lib.TAY_TV_RECORD, lib.TAY_TV_START, lib.TAY_TV_FINISH,
                          lib.TAY_TV_DETAILS, lib.TAY_TV_RETRY, lib.TAY_TV_RESTART,
                          lib.TAY_TV_RESULT, lib.TAY_TV_COMPLETE,
                          lib.TAY_TV_AVAILABILITY_RECORD):
                held[slot + index] += start
    return (start + taken, order[0], rows, link_rows, waiting, (totals[0], totals[1], totals[2]),
            held)


def base_ids(buf: Any, jobs: Any, origin: int) -> list[bytes]:
    """Every job's id from ``base_jobs`` rows; see ``tay._native._pure_base.base_ids``."""
    count = len(jobs) // lib.TAY_BASE_JOB
    if not count:
        return []
    data = ffi.from_buffer("uint8_t[]", buf)
    out = _new_uncleared("uint8_t[]", 16 * count)
    if lib.tay_base_ids(data, len(data), origin, _column("uint64_t[]", jobs, 0, len(jobs)),
                        count, out):
        raise ValueError("a job id lies outside the buffer")
    return list(struct.unpack("16s" * count, ffi.buffer(out)))  # one bytes each, in C


def base_keys(buf: Any, jobs: Any, origin: int, slot: int,
              max_distinct: int) -> tuple[array, list[bytes]] | None:
    """A key column as indexes into its distinct keys; see
    ``tay._native._pure_base.base_keys``."""
    if slot not in (lib.TAY_BJ_QUEUE, lib.TAY_BJ_WORKER):
        raise ValueError(f"slot {slot} is not a key column")
    if max_distinct < 0:
        raise ValueError("max_distinct must be at least 0")
    count = len(jobs) // lib.TAY_BASE_JOB
    index = array("I", bytes(4 * count))
    if not count:
        return index, []
    data = ffi.from_buffer("uint8_t[]", buf)
    column = _column("uint64_t[]", jobs, 0, len(jobs))
    firsts = _new_uncleared("size_t[]", max(max_distinct, 1))
    found = lib.tay_base_keys(data, len(data), origin, column, count, slot, max_distinct,
                              ffi.from_buffer("uint32_t[]", index), firsts)
    if found == -2:
        return None
    if found < 0:
        raise ValueError("a key lies outside the buffer")
    raws = []
    for d in range(found):
        base = firsts[d] * lib.TAY_BASE_JOB + slot
        start = column[base] - origin
        raws.append(bytes(buf[start:start + column[base + 1]]))
    return index, raws


def _column(kind: str, column: Any, start: int, count: int) -> Any:
    """A column of integers as C reads it: an ``array`` in place, anything else copied."""
    if isinstance(column, array) and column.itemsize == ffi.sizeof(kind[:-2]):
        return ffi.from_buffer(kind, column) + start
    return ffi.new(kind, list(column[start:start + count]))


_EVENT_TAPE = 65536  # payloads longer than this take the slow path
_tape_scratch = threading.local()


def _event_tape() -> tuple:
    """This thread's scratch node tape for the per-payload Value check (allocated once per
    thread, reused). Per thread because cffi releases the GIL during the scan: replay and the
    online compactor scan at the same time, and a shared tape would be written by both."""
    try:
        return _tape_scratch.tape
    except AttributeError:
        tape = _tape_scratch.tape = (_new_uncleared("uint8_t[]", _EVENT_TAPE),
                                     _new_uncleared("uint64_t[]", _EVENT_TAPE),
                                     _new_uncleared("uint32_t[]", _EVENT_TAPE),
                                     _new_uncleared("double[]", _EVENT_TAPE))
        return tape


def _decode_counts() -> tuple:
    """This thread's node count and error offset cells for ``value_decode``."""
    try:
        return _tape_scratch.counts
    except AttributeError:
        counts = _tape_scratch.counts = (ffi.new("size_t *"), ffi.new("size_t *"))
        return counts


def _path_error(rc: int, *paths: str) -> OSError:
    return OSError(-rc, os.strerror(-rc), *paths)


def write_all_at(fd: int, data: Any, offset: int) -> None:
    """pwrite all of ``data`` at ``offset`` (EINTR and short writes retried in C)."""
    buf = ffi.from_buffer("uint8_t[]", data)
    rc = lib.tay_write_all_at(fd, buf, len(buf), offset)
    if rc:
        raise _path_error(rc)


def fdatasync(fd: int) -> None:
    rc = lib.tay_fdatasync(fd)
    if rc:
        raise _path_error(rc)


def fsync(fd: int) -> None:
    rc = lib.tay_fsync(fd)
    if rc:
        raise _path_error(rc)


def fsync_dir(path: str) -> None:
    """fsync the directory at ``path`` so creates and renames in it are durable."""
    rc = lib.tay_fsync_dir(os.fsencode(path))
    if rc:
        raise _path_error(rc, path)


def flock_exclusive(fd: int) -> bool:
    """Take LOCK_EX|LOCK_NB; False when another open file description holds it."""
    rc = lib.tay_flock_exclusive(fd)
    if rc < 0:
        raise _path_error(rc)
    return rc == 1


def rename_noreplace(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
    """renameat2(RENAME_NOREPLACE); EEXIST if the target exists. Never a replacing rename."""
    rc = lib.tay_rename_noreplace(src_dir_fd, os.fsencode(src_name), dst_dir_fd,
                                  os.fsencode(dst_name))
    if rc:
        raise OSError(-rc, os.strerror(-rc), src_name, None, dst_name)


def filesystem_magic(path: str) -> int:
    """statfs(path).f_type: 0xEF53 ext2/3/4, 0x58465342 XFS, 0x9123683E Btrfs, ..."""
    magic = ffi.new("uint64_t *")
    rc = lib.tay_filesystem_magic(os.fsencode(path), magic)
    if rc:
        raise _path_error(rc, path)
    return magic[0]


# ----------------------------------------------------------------------------- JSON <-> Value

_JSON_REASONS = {lib.TAY_J_MALFORMED: "malformed_json", lib.TAY_J_DUPLICATE_KEY: "duplicate_key",
                 lib.TAY_J_INTEGER_RANGE: "integer_out_of_range",
                 lib.TAY_J_UNSUPPORTED_TYPE: "unsupported_type"}


def _transcode_error(rc: int, offset: int) -> Exception:
    code = -rc
    if code in _JSON_REASONS:
        return ValueCodecError(_JSON_REASONS[code], offset)
    if code == lib.TAY_J_NO_MEMORY:
        return MemoryError("JSON <-> Value transcoding")
    if 1 <= code <= len(DECODE_REASONS):
        return ValueCodecError(DECODE_REASONS[code - 1], offset)
    return RuntimeError(f"transcoder returned {rc}")


_JSON_SCRATCH_BYTES = 16384  # output kept per thread for json_to_value (larger: allocated)
_json_scratch = threading.local()


# the results come back in an array the C writes through a view of its memory: read in
# one tolist() instead of a cdata subscript each; the output is read as a slice of a
# buffer over it (cheaper per call than ffi.unpack, which parses keywords)
_RESULTS_TYPE = "Q" if array("Q").itemsize == ffi.sizeof("size_t") else "L"
_json_to_value_measured = lib.tay_json_to_value_measured  # looked up once, not per call


def _json_buffers() -> tuple:
    """This thread's (output, a buffer over it, results' view, results), reused."""
    out = _new_uncleared("uint8_t[]", _JSON_SCRATCH_BYTES)
    results = array(_RESULTS_TYPE, bytes(4 * ffi.sizeof("size_t")))
    # output length, error offset, nodes, depth
    buffers = _json_scratch.buffers = (out, ffi.buffer(out),
                                       ffi.from_buffer("size_t[]", results), results)
    return buffers


def json_to_value(json: Any) -> bytes:
    """Canonical Value bytes of one JSON document; ValueCodecError (input offset) if refused."""
    return json_to_value_measured(json)[0]


def json_to_value_measured(json: Any) -> tuple[bytes, int, int]:
    """``json_to_value(json)`` and the Value's depth and node count (``measure``'s: every
    value and object key a node, the root at depth 1, a member one below its object). The
    one transcoding call of both: the counting costs the C walk next to nothing."""
    data = json if type(json) is bytes else bytes(json)
    size = len(data)
    if 2 * size + 64 <= _JSON_SCRATCH_BYTES:  # most args: this thread's buffers, no allocation
        try:
            out, written, results_view, results = _json_scratch.buffers
        except AttributeError:
            out, written, results_view, results = _json_buffers()
        rc = _json_to_value_measured(data, size, out, 2 * size + 64, results_view)
        if rc >= 0:
            length, _, nodes, depth = results.tolist()
            return written[0:length], depth, nodes
        if rc != -lib.TAY_J_OUTPUT_FULL:
            raise _transcode_error(rc, results[1])
    if size > 0xFFFFFFFF:
        raise ValueError(f"JSON input of {size} bytes exceeds 4 GiB")
    results = ffi.new("size_t[4]")  # output length, error offset, nodes, depth
    # 2x covers text-heavy documents; 9x (a 1-byte number -> 9 bytes) always suffices
    for capacity in (2 * size + 64, 9 * size + 16):
        out = _new_uncleared("uint8_t[]", capacity)
        rc = lib.tay_json_to_value_measured(data, size, out, capacity, results)
        if rc != -lib.TAY_J_OUTPUT_FULL:
            break
    if rc < 0:
        raise _transcode_error(rc, results[1])
    return ffi.unpack(ffi.cast("char *", out), results[0]), results[3], results[2]


def value_to_json(
    buf: Any, max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
) -> bytes:
    """Compact JSON (orjson's bytes) of the Value in ``buf``; ValueCodecError if refused."""
    if not (0 <= max_depth <= 256 and 0 <= max_nodes <= 0xFFFFFFFF and 0 <= max_binary <= 0xFFFFFFFF):
        check_limits(max_depth, max_nodes, max_binary)  # raises, naming the parameter
    source = buf if type(buf) is bytes else ffi.from_buffer("uint8_t[]", buf)
    size = len(source)
    results = ffi.new("size_t[2]")  # output length, error offset
    # 2x covers most values; 6x (a 1-byte nil in a list -> "false," worst case) always does
    for capacity in (2 * size + 64, 6 * size + 64):
        out = _new_uncleared("uint8_t[]", capacity)
        rc = lib.tay_value_to_json(source, size, max_depth, max_nodes, max_binary, out,
                                   capacity, results, results + 1)
        if rc != -lib.TAY_J_OUTPUT_FULL:
            break
    if rc < 0:
        raise _transcode_error(rc, results[1])
    return ffi.unpack(ffi.cast("char *", out), results[0])


class LiveTable:
    """Live job rows in C (``tay_live_table``); see ``tay._native._pure_live.LiveTable``."""

    __slots__ = ("_table",)

    def __init__(self, next_order: int = 1) -> None:
        if not 0 <= next_order < 2**64:
            raise ValueError("next_order must be a u64")
        out = ffi.new("tay_live_table **")
        if lib.tay_live_new(1024, next_order, out) < 0:
            raise MemoryError("tay_live_new: out of memory")
        self._table = ffi.gc(out[0], lib.tay_live_free)

    def __len__(self) -> int:
        return lib.tay_live_count(self._table)

    @property
    def next_order(self) -> int:
        return lib.tay_live_next_order(self._table)

    def find(self, job_id: bytes) -> int | None:
        if len(job_id) != 16:
            raise ValueError("a job id is 16 bytes")
        number = lib.tay_live_find(self._table, job_id)
        return None if number < 0 else number

    def get(self, number: int) -> tuple[bytes, tuple[int, ...]]:
        job_id = ffi.new("uint8_t[16]")
        row = ffi.new("uint64_t[]", lib.TAY_LIVE_ROW)
        if number < 0 or lib.tay_live_get(self._table, number, job_id, row) < 0:
            raise IndexError(f"no live row {number}")
        return bytes(ffi.buffer(job_id)), tuple(row)

    def retryable(self, number: int, revision: int, next_attempt: int,
                  eligible_at: int) -> None:
        if number < 0 or lib.tay_live_retryable(self._table, number, revision, next_attempt,
                                                eligible_at) < 0:
            raise IndexError(f"no live row {number}")

    def hold(self, job_id: bytes) -> int | None:
        if len(job_id) != 16:
            raise ValueError("a job id is 16 bytes")
        number = lib.tay_live_hold(self._table, job_id)
        if number == -2:
            raise MemoryError("tay_live_hold: out of memory")
        return None if number < 0 else number

    def apply(self, buf: Any, offsets: Sequence[int], rows: Sequence[int]
              ) -> tuple[int, list[int]]:
        data = ffi.from_buffer("uint8_t[]", buf)
        check_apply_input(len(data), offsets, rows)
        count = len(offsets)
        if not count:
            return 0, []
        numbers = _new_uncleared("uint64_t[]", count)
        applied = lib.tay_live_apply(self._table, data, count, ffi.new("uint64_t[]", list(offsets)),
                                     ffi.new("uint64_t[]", list(rows)), numbers)
        if applied < 0:
            raise MemoryError("tay_live_apply: out of memory")
        return applied, list(numbers[0:applied])
