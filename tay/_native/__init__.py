"""tay's native core: CRC32C, Record v1 frames, the Value codec, socket framing, file ops.

Two twins implement the same API: ``tay._native.c`` (the cffi module built from ``csrc/``)
and ``tay._native.pure`` (pure Python). This package re-exports the C one when it is built
and falls back to the pure one otherwise. ``TAY_NATIVE=python`` forces the pure twin;
``TAY_NATIVE=c`` insists on the C one (ImportError if it is not built).

API (see docs/native.md for the details and error conventions):

- ``IMPLEMENTATION``: "c" or "python"; ``CRC32C_IMPLEMENTATION``: "sse4.2", "armv8" or
  "software" (``TAY_CRC32C_SOFTWARE=1`` forces software inside the C module).
- ``crc32c(data, value=0) -> int``: chainable, ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
- ``encode_records([(type, schema, sequence, payload), ...]) -> bytes``: Record v1 frames.
- ``scan_records(buf, start, end, budget, first_sequence) -> (records, stop_offset, stop)``
  with ``records`` a list of ``(offset, type, schema, sequence, payload_length)`` and
  ``stop`` in "end" | "not_record" | "bad_record" | "sequence".
- ``scan_record_columns(buf, start, end, budget, first_sequence) -> (offsets, types,
  schemas, lengths, stop_offset, stop)``: the same walk as columns (``array('Q')``, bytes,
  bytes, ``array('I')``; sequences are ``first_sequence + index``), ~14 bytes per record.
- ``value_encode(obj) -> bytes`` / ``value_decode(buf, max_depth=64, max_nodes=100_000,
  max_binary=16_777_216)``; errors are ``ValueCodecError(reason, offset)``.
- ``json_to_value(json) -> bytes``: canonical Value bytes straight from JSON text (keys
  sorted by UTF-8 bytes, duplicates refused); ``value_to_json(buf, max_depth, max_nodes,
  max_binary) -> bytes``: the compact JSON orjson writes for the decoded Value. Errors are
  ``ValueCodecError`` (JSON reasons: ``malformed_json``, ``duplicate_key``,
  ``integer_out_of_range``, ``invalid_utf8``, ``non_finite_float``, ``depth_limit`` at input
  offsets; ``unsupported_type`` for bytes in value_to_json). ``json_to_value_measured(json)
  -> (bytes, depth, nodes)``: the same, with the depth and node count
  ``tay.engine.validation.values.measure`` gives the decoded value.
- ``events_scan(buf, [(payload_offset, length, type, schema), ...], max_depth, max_nodes,
  max_binary) -> list[int]``: the Event-v1 batch fast path, ``EVENT_ROW`` (24) ints per
  record; slot 0 is 0 (fast: fields filled) or 1 (slow: decode it with the exact decoder).
  Slots (``tay._native._pure_events``): AT, EXPECTED, JOB_ID (offset), NIL (bit k = slot k
  is nil), A..F (per pair), DEFINITION/ARGS/QUEUE/WORKER offset+length, MAX_ATTEMPTS,
  SCHEDULED_AT, TIMEOUT_MS, END, ARGS_NODES (every value and map key inside args); offsets
  are relative to the payload start.
- ``snapshots_scan(buf, [(payload_offset, length), ...], max_depth, max_nodes, max_binary)
  -> list[int]``: the Store-v2 (7,1) snapshot batch fast path, ``SNAPSHOT_ROW`` (40) ints
  per record, slot 0 fast (0) or slow (1) as above; the slots are in
  ``tay._native._pure_snapshots`` (prefix tokens, the body's fields with a NIL bit mask,
  STATE as an index, and from DEFINITION on an Event-v1 row's definition slots).
- ``mutations_scan(buf, [(payload_offset, length), ...], max_depth, max_nodes, max_binary)
  -> list[int]``: the Store-v2 (8,1) mutation batch fast path, ``MUTATION_ROW`` (26) ints
  per record: the Event-v1 row (``events_scan`` slots) of the event the mutation stands for,
  then ORDER and KIND (``tay._native._pure_mutations``).
- ``base_jobs(buf, offsets, lengths, types, schemas, start, stop, last_id, max_depth,
  max_nodes, max_binary, take_live=False, open_end=False) -> (next, rows, live)``: a
  Store-v2 base segment's finished jobs as columns, one call per run of records
  (``tay._native._pure_base``): ``BASE_JOB`` (18) ints (one ``array('Q')``) per job taken
  whole (a terminal snapshot, then at most a completed job's result and at most its
  failure's details, in that order), and with ``take_live``
  ``BASE_LIVE`` (18) per live job (a waiting snapshot and at most its failure's details),
  stopping before the first record it cannot vouch for (with ``open_end``, before a job
  whose records end the range); ``next`` is that record's index.
- ``base_ids(buf, jobs, origin) -> list[bytes]`` and ``base_keys(buf, jobs, origin, slot,
  max_distinct) -> (index, raws) | None``: from ``base_jobs`` rows over ``buf`` (its byte 0
  at segment offset ``origin``), every job's id, and a queue or worker key column as an
  ``array('I')`` of indexes into the distinct keys (first appearance order; None when
  there are more than ``max_distinct``); ``ValueError`` for bytes outside ``buf``.
- ``tail_jobs(buf, offsets, lengths, types, schemas, start, stop, next_order, max_depth,
  max_nodes, max_binary) -> (next, next_order, rows, links, pending, totals, live)``: a
  Store-v2 tail's common job lifecycles (insert, start, success, its result) taken while
  every record is one (``tay._native._pure_tail``): ``BASE_JOB`` rows and ``TAIL_LINK`` (8)
  ints per job whose four records were taken, (index, state changes before, ready pushes
  before) per record of a job not done, the allocator after them, and ``TAIL_LIVE`` (27)
  ints per job left available at its insert, executing at its start or retryable after a
  worker failure (held as a row, or built from its insert and start, instead of replaying
  its records one by one).
- ``LiveTable(next_order)``: live job rows (``tay._native._pure_live``): a 16-byte id to
  ``LIVE_ROW`` (14) ints of its durable fields; ``.apply(buf, offsets, rows) -> (applied,
  numbers)`` applies ``mutations_scan`` rows as the reducer would and stops before the first
  it cannot apply; ``.find(id)``, ``.get(number)``, ``len()``, ``.next_order``.
- ``split_frames(buf, max_frame) -> (frames, consumed, error)``; ``frames`` are
  ``(start, end)`` payload slices; ``error`` None | "frame_too_large" | "empty_frame".
- ``split_frames_marked(buf, max_frame, max_depth, max_nodes, max_key_bytes) -> (frames,
  consumed, error)``: the same split with ``(start, end, mark, ids)`` frames: mark 0 (check
  it the exact way), 1 (clean: the payload, if valid JSON, is an object within those bounds
  with no repeated key and no integer literal of 19+ digits for sure; ``json_domain_clean(json,
  max_depth, max_nodes, max_key_bytes)`` for one text; not clean is never a refusal), 2 or 3 (a clean ``started`` / ``succeeded`` report
  with a null or no result, read already: ids is (request_id, reservation_id, execution_id)
  as str; None for the other marks). ``FrameScan(max_frame, max_depth, max_nodes,
  max_key_bytes)``: those limits checked and set once (ValueError out of range; the C twin
  prepares one ``tay_frame_scan``), ``.split(buf)`` is ``split_frames_marked(buf, *limits)``:
  what a decoder keeps. ``json_report(json) -> (mark, spans)`` for one text:
  the report is written in a strict subset of JSON (the six report keys once each, strings
  of printable ASCII without escapes, ``version`` 1, ``result`` null), so what it reads is
  what a decoder reads; anything else is mark 0, never a refusal. Mark 4: a clean
  ``enqueue`` whose top level is written in that subset (``json_enqueue(json) -> (mark,
  spans)`` for one text): ids is (request_id, task, args, options), the first two str, the
  others the bytes of their JSON text (options None when absent), for the caller to decode
  (the payload is valid JSON exactly when both are), and last the options read when they
  are plain: (retries, queue, durability), None for a null or absent queue or durability
  (retries 0), or None when they are not (then the options text must be decoded), and
  last whether the options are plain and the args text is ``json_canonical`` (the split's
  only: ``json_enqueue`` does not check the args).
- ``json_enqueued(json) -> (mark, spans)``: mark 1 when ``json`` is an ``enqueued`` reply
  written exactly as tay serve writes it, all of it in a strict subset of JSON (no
  whitespace, plain ASCII strings, numbers without an exponent or a run of 19 digits, no
  repeated key), so it is valid JSON that a decoder reads exactly: spans are the (start,
  end) of request_id, job_id and the job's durability string ((0, 0) when it has none);
  ``(0, ())`` otherwise, never a refusal (the SDK's producer reads its reply with it).
- ``json_canonical(json) -> bool``: whether ``json`` is an object written exactly as
  ``orjson.dumps(orjson.loads(json), option=orjson.OPT_SORT_KEYS)`` writes it, for sure (no
  whitespace, keys in strictly increasing byte order, strings of valid UTF-8 without escapes
  or control bytes, integers only within -2^63..2^64-1 without -0 or leading zeros, true,
  false, null, at most 128 levels); False is "not known", never a refusal.
- ``json_member_count(json) -> int``: colons outside strings of a valid JSON text, i.e. the
  members of all its objects (the protocol decoder compares it with the decoded objects'
  sizes to refuse duplicate keys, which orjson keeps silently).
- ``write_all_at(fd, data, offset)``, ``fdatasync(fd)``, ``fsync(fd)``, ``fsync_dir(path)``,
  ``flock_exclusive(fd) -> bool``, ``rename_noreplace(src_dir_fd, src, dst_dir_fd, dst)``,
  ``filesystem_magic(path) -> int``; failures raise OSError with errno.
"""

from __future__ import annotations

import os

from tay._native.errors import RESOURCE_REASONS, ValueCodecError

_choice = os.environ.get("TAY_NATIVE", "").strip().lower()
if _choice not in ("", "c", "python"):
    raise ImportError(f"TAY_NATIVE must be 'c' or 'python', got {_choice!r}")

if _choice == "python":
    from tay._native import pure as _active
else:
    try:
        from tay._native import c as _active  # type: ignore[no-redef]
    except ImportError:
        if _choice == "c":
            raise
        from tay._native import pure as _active  # type: ignore[no-redef]

IMPLEMENTATION: str = _active.IMPLEMENTATION
CRC32C_IMPLEMENTATION: str = _active.CRC32C_IMPLEMENTATION
crc32c = _active.crc32c
encode_records = _active.encode_records
scan_records = _active.scan_records
scan_record_columns = _active.scan_record_columns
value_encode = _active.value_encode
value_decode = _active.value_decode
json_to_value = _active.json_to_value
json_to_value_measured = _active.json_to_value_measured
value_to_json = _active.value_to_json
split_frames = _active.split_frames
split_frames_marked = _active.split_frames_marked
FrameScan = _active.FrameScan
json_report = _active.json_report
json_enqueue = _active.json_enqueue
json_enqueued = _active.json_enqueued
json_domain_clean = _active.json_domain_clean
json_canonical = _active.json_canonical
json_member_count = _active.json_member_count
events_scan = _active.events_scan
snapshots_scan = _active.snapshots_scan
mutations_scan = _active.mutations_scan
base_jobs = _active.base_jobs
base_ids = _active.base_ids
base_keys = _active.base_keys
tail_jobs = _active.tail_jobs
LiveTable = _active.LiveTable
write_all_at = _active.write_all_at
fdatasync = _active.fdatasync
fsync = _active.fsync
fsync_dir = _active.fsync_dir
flock_exclusive = _active.flock_exclusive
rename_noreplace = _active.rename_noreplace
filesystem_magic = _active.filesystem_magic

__all__ = [
    "IMPLEMENTATION", "CRC32C_IMPLEMENTATION", "ValueCodecError", "RESOURCE_REASONS",
    "crc32c", "encode_records", "scan_records", "scan_record_columns", "value_encode",
    "value_decode", "json_to_value", "json_to_value_measured", "value_to_json",
    "split_frames", "events_scan", "snapshots_scan", "mutations_scan", "base_jobs", "base_ids", "base_keys", "tail_jobs", "LiveTable", "write_all_at", "fdatasync", "fsync", "fsync_dir", "flock_exclusive",
    "json_domain_clean", "split_frames_marked", "FrameScan", "json_report",
    "json_enqueue", "json_enqueued", "json_canonical",
    "rename_noreplace", "filesystem_magic",
]
