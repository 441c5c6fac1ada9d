"""The C journal writer thread (``csrc/writer.c``, ``csrc/writer_io.c``): C only.

Its pure-Python twin is ``tay.storage.journal.commit.GroupCommitter`` (a Python thread over
``Journal``, which needs the I/O seam of ``tay.storage.fsio``); the storage layer wraps this
handle in ``tay.storage.journal.native_commit.NativeCommitter`` with the same interface.
Importing this module raises ImportError when the cffi extension is not built.

``NativeWriter`` owns one ``tay_writer``: ``submit`` encodes a submission's frames in C
(one call, no object per record on the C side) and returns its ticket; ``durable``,
``stopped`` and ``event_fd`` are read without any lock; ``failure()`` and ``stats()`` copy
the C structs into dicts. Errors: ``ValueError`` for bad records (naming index and field),
``WriterArgument`` for a sequence that does not continue the journal, ``WriterClosed``.
"""

from __future__ import annotations

import errno
import struct
from array import array
from typing import Any, Sequence

from tay._native._tay_native import ffi, lib  # ImportError when not built
from tay._native.checks import check_record_fields

MAX_DIRS = lib.TAY_WRITER_MAX_DIRS
PHASES = ("batches", "idle_ns", "held_ns", "queued_ns", "take_ns", "write_ns", "verify_ns",
          "sync_ns", "check_ns", "publish_ns")
KINDS = {lib.TAY_WK_IO: "io", lib.TAY_WK_CHANGED_VIEW: "changed_view",
         lib.TAY_WK_RESOURCE_LIMIT: "resource_limit"}
REASONS = {lib.TAY_WR_APPEND_FAILED: "append_failed",
           lib.TAY_WR_FDATASYNC_FAILED: "fdatasync_failed",
           lib.TAY_WR_CHECK_PATHS_FAILED: "check_paths_failed",
           lib.TAY_WR_PATH_CHANGED: "path_changed",
           lib.TAY_WR_LOCK_LINKS: "path_changed",
           lib.TAY_WR_STORE_EXHAUSTED: "store_exhausted",
           lib.TAY_WR_NO_MEMORY: "writer_crashed"}
_RECEIPT_CHUNK = 256
# the loop's per-job calls, looked up once: a cffi ``lib`` attribute is a lookup per use
_submit, _flush = lib.tay_writer_submit, lib.tay_writer_flush
_durable, _completed = lib.tay_writer_durable, lib.tay_writer_completed
_wait, _stopped = lib.tay_writer_wait, lib.tay_writer_stopped
_WAITED = {0: None, lib.TAY_WRITER_STOPPED: "stopped", lib.TAY_WRITER_CLOSED: "closed",
           lib.TAY_WRITER_TIMEOUT: "timeout"}


# a record's meta for tay_writer_submit: type, schema, sequence, payload length
_META = struct.Struct("=4Q")


def submission_meta(records: Sequence[tuple[int, int, int, Any]]) -> array:
    """The general path of ``NativeWriter.submit``'s meta, field by field: the reference its
    packed fast path must equal (tests/native); a bad field raises the ``ValueError`` of
    ``check_record_fields`` naming the record, else the conversion's own error."""
    meta = array("Q")
    try:
        for sequence, rtype, schema, payload in records:
            meta.extend((rtype, schema, sequence, len(payload)))
    except (OverflowError, TypeError):
        NativeWriter._refuse_fields(records)
        raise
    return meta


def pack_submission(records: Sequence[tuple[int, int, int, Any]]) -> tuple[bytes, bytes]:
    """``tay_writer_submit``'s meta and payload bytes for ``records``: one ``struct`` pack per
    record (no array, no per-field extend); anything it cannot pack goes the general way
    (``submission_meta``), which raises exactly as the writer always did."""
    try:
        if len(records) == 1:  # most engine steps: no join
            sequence, rtype, schema, blob = records[0]
            meta = _META.pack(rtype, schema, sequence, len(blob))
            return meta, blob if type(blob) is bytes else bytes(blob)
        return (b"".join([_META.pack(rtype, schema, sequence, len(payload))
                          for sequence, rtype, schema, payload in records]),
                b"".join([record[3] for record in records]))
    except (struct.error, TypeError, ValueError, OverflowError):
        return submission_meta(records).tobytes(), b"".join(record[3] for record in records)


class WriterSequenceError(ValueError):
    """A submission's sequences do not continue the journal (nothing was queued)."""


class WriterClosed(RuntimeError):
    """The writer is closing or closed."""


class NativeWriter:
    """One running C writer thread over an open journal's descriptors."""

    def __init__(self, *, dir_fds: Sequence[int], dir_names: Sequence[str], lock_fd: int,
                 lock_name: str, segment_fd: int, store_id: bytes, segment_id: int,
                 first_sequence: int, size: int, record_count: int, next_sequence: int,
                 history_bytes: int, segment_crc: int, sync: bool, rotation_target: int,
                 max_events: int, interval_ms: int, linger: bool, ledger_fd: int = -1,
                 epoch_id: bytes = bytes(16), ledger_size: int = 0,
                 ledger_highest: int = 0, rt_priority: int = 0, slice_us: int = 0,
                 gather_us: int = 0) -> None:
        if not 1 <= len(dir_fds) == len(dir_names) <= MAX_DIRS:
            raise ValueError(f"1..{MAX_DIRS} pinned directories, root first")
        config = ffi.new("tay_writer_config *")
        self._names = [ffi.new("char[]", name.encode("utf-8", "surrogateescape"))
                       for name in (*dir_names, lock_name)]  # kept alive with the writer
        for index, fd in enumerate(dir_fds):
            config.dir_fds[index] = fd
            config.dir_names[index] = self._names[index]
        config.dir_count = len(dir_fds)
        config.lock_fd = lock_fd
        config.lock_name = self._names[-1]
        config.segment_fd = segment_fd
        config.store_id = store_id
        config.segment_id = segment_id
        config.first_sequence = first_sequence
        config.size = size
        config.record_count = record_count
        config.next_sequence = next_sequence
        config.history_bytes = history_bytes
        config.segment_crc = segment_crc
        config.sync_mode = 1 if sync else 0
        config.rotation_target = rotation_target
        config.max_events = max_events
        config.interval_ns = interval_ms * 1_000_000
        config.linger = 1 if linger else 0
        config.gather_ns = gather_us * 1000  # group commit under load (gather_wait)
        # SEGMENT-LEDGER: each successor's entry is appended at ledger_size (-1: no ledger)
        config.ledger_fd = ledger_fd
        config.epoch_id = epoch_id
        config.ledger_size = ledger_size
        config.ledger_highest = ledger_highest
        config.rt_priority = rt_priority  # 0: as the creator; 1..99: SCHED_FIFO
        config.slice_ns = slice_us * 1000  # 0: the creator's fair-scheduler slice
        handle = ffi.new("tay_writer **")
        rc = lib.tay_writer_start(config, handle)
        if rc == lib.TAY_WRITER_ARGUMENT:
            raise ValueError("writer configuration refused (descriptors, ids, batching or "
                             "real-time priority)")
        if rc == -errno.EPERM and rt_priority:
            raise PermissionError(errno.EPERM, f"the journal writer cannot run SCHED_FIFO at "
                                  f"priority {rt_priority}: it needs CAP_SYS_NICE or "
                                  f"RLIMIT_RTPRIO >= {rt_priority}")
        if rc != 0:
            raise OSError(-rc if rc < 0 and rc > -4096 else 12, "cannot start the writer thread")
        self._w = handle[0]
        self.event_fd = lib.tay_writer_event_fd(self._w)
        self._error_index = ffi.new("size_t *")
        self._batches_seen = 0
        self._closed = False

    # -- the hot path ------------------------------------------------------------------
    def submit(self, records: Sequence[tuple[int, int, int, Any]], hold: bool) -> int:
        """Queue ``(sequence, type, schema, payload)`` records as one submission; its ticket."""
        meta, blob = pack_submission(records)
        ticket = lib.tay_writer_submit(self._w, len(records), meta, blob, len(blob),
                                       1 if hold else 0, self._error_index)
        if ticket > 0:
            return ticket
        if ticket == lib.TAY_WRITER_ARGUMENT:
            self._refuse_fields(records)
            raise ValueError(f"record {self._error_index[0]}: refused by the writer")
        if ticket == lib.TAY_WRITER_SEQUENCE:
            raise WriterSequenceError(f"record {self._error_index[0]}: sequence "
                                      f"{records[self._error_index[0]][0]} does not continue the journal")
        if ticket == lib.TAY_WRITER_CLOSED:
            raise WriterClosed("the writer is closed")
        raise MemoryError("no memory to queue a submission")

    def submit_packed(self, count: int, meta: bytes, blob: bytes, hold: bool) -> int:
        """``submit`` of records already packed as ``pack_submission`` packs them (``meta``
        and ``blob`` bytes): the ticket, or 0 when the writer refused them. Nothing is queued
        then, so the caller goes ``submit``'s way, which raises the error it always did."""
        ticket = _submit(self._w, count, meta, blob, len(blob), 1 if hold else 0,
                         self._error_index)
        return ticket if ticket > 0 else 0

    @staticmethod
    def _refuse_fields(records: Sequence[tuple[int, int, int, Any]]) -> None:
        for index, (sequence, rtype, schema, payload) in enumerate(records):
            check_record_fields(index, rtype, schema, sequence, len(payload))

    def flush(self) -> None:
        _flush(self._w)

    @property
    def durable(self) -> int:
        return _durable(self._w)

    @property
    def stopped(self) -> bool:
        return bool(_stopped(self._w))

    def completed(self) -> int:
        """After a wake-up of ``event_fd``: consume it and return ``durable``, or -1 once
        stopped (one call where the loop made three)."""
        return _completed(self._w)

    # -- blocking callers and reports ---------------------------------------------------
    def wait(self, ticket: int, timeout: float | None) -> str | None:
        """None once durable, else "stopped", "closed" or "timeout"."""
        timeout_ns = -1 if timeout is None else max(0, int(timeout * 1e9))
        return _WAITED[_wait(self._w, ticket, timeout_ns)]

    def new_receipts(self) -> list[dict[str, int]]:
        """Receipts of the batches made durable since the last call, oldest first (the C
        ring keeps the last 4,096: older ones not asked for in time are skipped)."""
        out = ffi.new("tay_writer_receipt[]", _RECEIPT_CHUNK)
        next_batch = ffi.new("uint64_t *")
        receipts: list[dict[str, int]] = []
        while True:
            count = lib.tay_writer_receipts(self._w, self._batches_seen, out, _RECEIPT_CHUNK,
                                            next_batch)
            self._batches_seen = next_batch[0]
            for index in range(count):
                item = out[index]
                receipts.append({name: getattr(item, name) for name in (
                    "first_ticket", "last_ticket", "segment_id", "offset", "first_sequence",
                    "last_sequence", "count")})
            if count < _RECEIPT_CHUNK:
                return receipts

    def failure(self) -> dict[str, Any]:
        """Why the writer stopped: kind, reason, errno, path, ... (see csrc/tay_native.h)."""
        out = ffi.new("tay_writer_failure *")
        lib.tay_writer_failure_of(self._w, out)
        report: dict[str, Any] = {
            "kind": KINDS.get(out.kind, "io"), "reason": REASONS.get(out.reason, "writer_failed"),
            "errno": out.error_number, "path": ffi.string(out.path).decode("utf-8", "replace"),
            "name": ffi.string(out.name).decode("utf-8", "replace"),
            "detail": ffi.string(out.detail).decode("utf-8", "replace"),
            "segment_id": out.segment_id, "links": out.links, "cut_back": out.cut_back,
            "cut_back_errno": out.cut_back_errno, "cut_back_to": out.cut_back_to,
            "cut_back_bytes": out.cut_back_bytes,
        }
        return report

    def observe(self, latency_bounds_s: Sequence[float], batch_bounds: Sequence[int]) -> None:
        """Start C-side histograms of each batch's events, write and sync time."""
        latency = array("Q", [round(bound * 1e9) for bound in latency_bounds_s])
        batches = array("Q", [int(bound) for bound in batch_bounds])
        if lib.tay_writer_observe(self._w, ffi.from_buffer("uint64_t[]", latency), len(latency),
                                  ffi.from_buffer("uint64_t[]", batches), len(batches)) != 0:
            raise ValueError(f"at most {lib.TAY_WRITER_BUCKETS} bounds per histogram")
        self._bucket_counts = (len(batches), len(latency))

    def observations(self) -> dict[str, Any]:
        """The histograms so far: per-bucket counts (last: above every bound) and sums."""
        out = ffi.new("tay_writer_observations *")
        lib.tay_writer_observations_of(self._w, out)
        batch_n, latency_n = getattr(self, "_bucket_counts", (0, 0))
        return {
            "batches": out.batches,
            "events": (list(out.events_counts[0:batch_n + 1]), out.events_total),
            "write": (list(out.write_counts[0:latency_n + 1]), out.write_ns_total / 1e9),
            "sync": (list(out.sync_counts[0:latency_n + 1]), out.sync_ns_total / 1e9),
        }

    def scheduling(self) -> tuple[int, int]:
        """The writer thread's ``(policy, priority)``: ``os.SCHED_OTHER``, ``os.SCHED_FIFO``..."""
        if self._closed:
            raise WriterClosed("the writer is closed")
        policy, priority = ffi.new("int *"), ffi.new("int *")
        rc = lib.tay_writer_scheduling(self._w, policy, priority)
        if rc:
            raise OSError(rc, "cannot read the writer thread's scheduling")
        return policy[0], priority[0]

    def fair_slice(self) -> tuple[int, int, int]:
        """The writer thread's ``(slice_ns, nice, errno)``: its fair-scheduler slice and nice
        as the kernel reports them, and why asking for ``slice_us`` failed (0: it did not)."""
        if self._closed:
            raise WriterClosed("the writer is closed")
        slice_ns, nice, set_errno = ffi.new("uint64_t *"), ffi.new("int *"), ffi.new("int *")
        rc = lib.tay_writer_fair_slice(self._w, slice_ns, nice, set_errno)
        if rc:
            raise OSError(rc, "cannot read the writer thread's scheduling")
        return slice_ns[0], nice[0], set_errno[0]

    def stats(self) -> dict[str, int]:
        out = ffi.new("tay_writer_stats *")
        lib.tay_writer_stats_of(self._w, out)
        return {name: getattr(out, name) for name in (
            "submissions", "events", "batches", "fsyncs", "largest_batch", "writes", "syncs",
            "gathered")}

    def phases(self) -> dict[str, int]:
        """Where the writer thread's time went (``tay_writer_phases``: ns totals)."""
        out = ffi.new("tay_writer_phases *")
        lib.tay_writer_phases_of(self._w, out)
        return {name: getattr(out, name) for name in PHASES}

    def close(self) -> dict[str, int]:
        """Drain, stop the thread and return where the journal stands (``segment_fd`` is
        the caller's again; -1 if the writer stopped)."""
        tail = ffi.new("tay_writer_tail *")
        lib.tay_writer_close(self._w, tail)
        self._closed = True
        return {name: getattr(tail, name) for name in (
            "segment_fd", "segment_id", "first_sequence", "size", "committed_size",
            "record_count", "next_sequence", "history_bytes", "segment_crc", "ledger_size",
            "ledger_highest")}

    def free(self) -> None:
        if self._w is not None and self._closed:
            lib.tay_writer_free(self._w)
            self._w = None
            self.event_fd = -1

    # -- test seams -------------------------------------------------------------------
    def test_faults(self, fail_write_at: int = 0, fail_sync_at: int = 0, fail_errno: int = 5,
                    short_write_bytes: int = 0) -> None:
        lib.tay_writer_test_faults(self._w, fail_write_at, fail_sync_at, fail_errno,
                                   short_write_bytes)

    def test_gate(self, closed: bool) -> None:
        lib.tay_writer_test_gate(self._w, 1 if closed else 0)

    def test_gate_entered(self) -> bool:
        return bool(lib.tay_writer_test_gate_entered(self._w))

    def test_sync_avg(self, sync_avg_ns: int) -> None:
        """The recent fdatasync time gathering goes by, as if the disk were that slow."""
        lib.tay_writer_test_sync_avg(self._w, sync_avg_ns)


def gather_wait(queued: int, siblings: int, since_done_ns: int, sync_ns: int,
                cap_ns: int) -> int:
    """``tay_writer_gather_wait``: how long (ns) a flushed batch waits for more submissions
    (tests check the Python twin's rule against it)."""
    return lib.tay_writer_gather_wait(queued, siblings, since_done_ns, sync_ns, cap_ns)
