"""Segment v1: one journal file = 44-byte header, Record v1 frames, optional 64-byte footer.

See docs/storage-format.md for the byte layout. This module holds the header and footer
codecs, the file names, the scan of one whole file (:func:`scan_segment`) and the checks
across all segments of a store (:func:`topology_check`).

Refusals are ``RecoveryRefused`` (conventions in ``tay.storage.formats.value``) carrying ``kind``
(physical_corruption, unsupported_physical, continuity, incomplete_tail, resource_limit),
``reason``, ``path``, ``segment_id``, the absolute file ``offset`` and, when known, the
record ``sequence``. A segment is either **active** (header and records, no footer; only
the highest segment may be active) or **sealed** (ends in a valid footer).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from tay import _native
from tay._frozen import Frozen, LazyPattern, set_field
from tay.failures import RecoveryRefused
from tay.storage.formats.record import MAGIC as RECORD_MAGIC
from tay.storage.formats.record import MAX_PAYLOAD, MAX_SEQUENCE, Buffer, decode_record
from tay.storage.formats.record_table import RecordRef, RecordTable
from tay.storage.formats.store_marker import check_fixed_object, check_store_id, refuse_object
from tay.storage.formats.value import locate

HEADER_MAGIC = b"TAYS"
FOOTER_MAGIC = b"TAYF"
HEADER_SIZE = 44
FOOTER_SIZE = 64
MAX_SEGMENT_BYTES = 1 << 30  # hard limit, footer included
MAX_ACTIVE_BYTES = MAX_SEGMENT_BYTES - FOOTER_SIZE  # an active file must leave room to seal
MAX_RECORDS = 38_347_918  # (1 GiB - header - footer) // smallest frame (28 bytes)
MAX_SEGMENT_ID = 2**64 - 1

_HEADER = struct.Struct(">4sBBHQQ16sI")
_FOOTER = struct.Struct(">4sBBHQQQQ16sII")
_STAGING_NAME = LazyPattern(r"\.tay-new-([0-9]{20})-([0-9a-f]{32})\.tmp")

# One scanned record: (offset, type, schema, sequence, payload_length). The payload is
# buf[offset + 24 : offset + 24 + payload_length]. A scan keeps them as a ``RecordTable``
# (columns), so a million-record replay does not hold a million tuples.


class SegmentHeader(Frozen):
    __slots__ = ("segment_id", "first_sequence", "store_id")
    segment_id: int
    first_sequence: int
    store_id: bytes

    def __init__(self, segment_id: int, first_sequence: int, store_id: bytes) -> None:
        set_field(self, "segment_id", segment_id)
        set_field(self, "first_sequence", first_sequence)
        set_field(self, "store_id", store_id)


class SegmentScan(Frozen):
    """A file that scanned cleanly. ``end`` is where the records stop (the footer start)."""

    __slots__ = ("segment_id", "first_sequence", "store_id", "state", "records", "end",
                 "size", "segment_crc")
    segment_id: int
    first_sequence: int
    store_id: bytes
    state: str  # "active" | "sealed"
    records: RecordTable | list[RecordRef]
    end: int
    size: int
    segment_crc: int | None  # CRC32C of bytes [0:end) (None: built by hand)

    def __init__(self, segment_id: int, first_sequence: int, store_id: bytes, state: str,
                 records: RecordTable | list[RecordRef], end: int, size: int,
                 segment_crc: int | None = None) -> None:
        set_field(self, "segment_id", segment_id)
        set_field(self, "first_sequence", first_sequence)
        set_field(self, "store_id", store_id)
        set_field(self, "state", state)
        set_field(self, "records", records)
        set_field(self, "end", end)
        set_field(self, "size", size)
        set_field(self, "segment_crc", segment_crc)

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def next_sequence(self) -> int:
        """The sequence a record appended after this segment's last one would carry."""
        return self.first_sequence + len(self.records)

    @property
    def last_sequence(self) -> int | None:
        return self.next_sequence - 1 if self.records else None


class Topology(Frozen):
    """What a store's segments say together (§2.7)."""

    __slots__ = ("next_sequence", "highest_id", "highest_state", "exhausted")
    next_sequence: int
    highest_id: int
    highest_state: str
    exhausted: bool

    def __init__(self, next_sequence: int, highest_id: int, highest_state: str,
                 exhausted: bool) -> None:
        set_field(self, "next_sequence", next_sequence)
        set_field(self, "highest_id", highest_id)
        set_field(self, "highest_state", highest_state)
        set_field(self, "exhausted", exhausted)


# -- file names -----------------------------------------------------------------------------

def segment_file_name(segment_id: int) -> str:
    """``00000000000000000001.tay`` for ID 1 (20 digits, lowercase ``.tay``)."""
    _check_id(segment_id)
    return f"{segment_id:020d}.tay"


def parse_segment_file_name(name: str) -> int | None:
    """The ID of a canonical segment name, or None (wrong shape, 0, or above 2^64-1)."""
    digits = name[:20]  # string tests, no pattern: every start reads its segment names
    if len(name) != 24 or not name.endswith(".tay") or not (digits.isascii() and digits.isdigit()):
        return None
    segment_id = int(digits)
    return segment_id if 1 <= segment_id <= MAX_SEGMENT_ID else None


def staging_file_name(segment_id: int, nonce: bytes) -> str:
    """``.tay-new-<20 digits>-<32 hex>.tmp``: a successor header before publication."""
    _check_id(segment_id)
    if len(nonce) != 16:
        raise ValueError("staging nonce must be 16 bytes")
    return f".tay-new-{segment_id:020d}-{nonce.hex()}.tmp"


def parse_staging_file_name(name: str) -> tuple[int, bytes] | None:
    """``(segment_id, nonce)`` of a well-formed staging name, or None."""
    match = _STAGING_NAME.fullmatch(name)
    if match is None:
        return None
    segment_id = int(match.group(1))
    if not 1 <= segment_id <= MAX_SEGMENT_ID:
        return None
    return segment_id, bytes.fromhex(match.group(2))


def _check_id(segment_id: int) -> None:
    if not isinstance(segment_id, int) or not 1 <= segment_id <= MAX_SEGMENT_ID:
        raise ValueError(f"segment ID must be 1..2^64-1, got {segment_id!r}")


# -- header and footer codecs ---------------------------------------------------------------

def encode_header(segment_id: int, first_sequence: int, store_id: bytes) -> bytes:
    """The immutable 44-byte header of a new segment."""
    _check_id(segment_id)
    if not 1 <= first_sequence <= MAX_SEQUENCE:
        raise ValueError(f"FIRST_SEQUENCE must be 1..2^64-1, got {first_sequence}")
    if len(store_id) != 16 or not any(store_id):
        raise ValueError("STORE_ID must be 16 bytes, not all zero")
    body = _HEADER.pack(HEADER_MAGIC, 1, 0, 0, segment_id, first_sequence, bytes(store_id), 0)
    return body[:40] + struct.pack(">I", _native.crc32c(body[:40]))


def decode_header(
    buf: Buffer, expected_id: int | None = None, expected_store_id: bytes | None = None
) -> SegmentHeader:
    """Decode the first 44 bytes of ``buf`` (fixed-object order, then field domains)."""
    check_fixed_object(buf[:HEADER_SIZE], HEADER_MAGIC, HEADER_SIZE, "segment_header")
    _, _, _, _, segment_id, first, store_id, _ = _HEADER.unpack_from(buf)
    if segment_id == 0:
        raise refuse_object("corrupt", "invalid_segment_id", "segment_header", 8)
    if first == 0:
        raise refuse_object("corrupt", "invalid_first_sequence", "segment_header", 16)
    check_store_id(store_id, "segment_header", 24)
    if expected_id is not None and segment_id != expected_id:
        raise refuse_object(
            "corrupt", "segment_id_mismatch", "segment_header", 8,
            expected=expected_id, found=segment_id,
        )
    if expected_store_id is not None and store_id != expected_store_id:
        raise refuse_object("corrupt", "store_id_mismatch", "segment_header", 24)
    return SegmentHeader(segment_id, first, store_id)


def encode_footer(header: SegmentHeader, record_count: int, segment_crc: int) -> bytes:
    """The 64-byte footer sealing a segment of ``record_count`` (>= 1) records.

    ``segment_crc`` is CRC32C of every byte before the footer (header and frames).
    """
    if not 1 <= record_count <= MAX_RECORDS:
        raise ValueError(f"a sealed segment holds 1..{MAX_RECORDS} records, not {record_count}")
    last = header.first_sequence + record_count - 1
    if last > MAX_SEQUENCE:
        raise ValueError("LAST_SEQUENCE would exceed 2^64-1")
    body = _FOOTER.pack(
        FOOTER_MAGIC, 1, 0, 0, header.segment_id, header.first_sequence, last, record_count,
        header.store_id, segment_crc, 0,
    )
    return body[:60] + struct.pack(">I", _native.crc32c(body[:60]))


def decode_footer(
    buf: Buffer, header: SegmentHeader, observed_count: int, segment_crc: int, offset: int = 0
) -> None:
    """Validate a 64-byte footer against its header and the records actually scanned."""
    check_fixed_object(buf, FOOTER_MAGIC, FOOTER_SIZE, "footer", offset)
    _, _, _, _, segment_id, first, last, count, store_id, stored_crc, _ = _FOOTER.unpack(
        bytes(buf)
    )

    def bad(reason: str, **fields: object) -> RecoveryRefused:
        return refuse_object("corrupt", reason, "footer", offset, **fields)

    if not 1 <= count <= MAX_RECORDS:
        raise bad("invalid_record_count", found=count)
    if segment_id == 0 or first == 0 or last == 0:
        raise bad("invalid_footer_field")
    if segment_id != header.segment_id:
        raise bad("segment_id_mismatch", expected=header.segment_id, found=segment_id)
    if first != header.first_sequence:
        raise bad("first_sequence_mismatch", expected=header.first_sequence, found=first)
    check_store_id(store_id, "footer", offset + 40)
    if store_id != header.store_id:
        raise bad("store_id_mismatch")
    if first + count - 1 > MAX_SEQUENCE or last != first + count - 1:
        raise bad("count_last_mismatch", first=first, count=count, last=last)
    if count != observed_count:
        raise bad("record_count_mismatch", expected=observed_count, found=count)
    if stored_crc != segment_crc:
        raise bad("segment_crc", expected=segment_crc, found=stored_crc)


# -- scanning one file ----------------------------------------------------------------------

class _Where(Frozen):
    """The file being scanned, for naming it in refusals."""

    __slots__ = ("path", "segment_id", "highest")
    path: str | None
    segment_id: int
    highest: bool

    def __init__(self, path: str | None, segment_id: int, highest: bool) -> None:
        set_field(self, "path", path)
        set_field(self, "segment_id", segment_id)
        set_field(self, "highest", highest)

    def refuse(self, kind: str, reason: str, offset: int, **fields: object) -> RecoveryRefused:
        return RecoveryRefused(
            kind, reason, path=self.path, offset=offset, segment_id=self.segment_id, **fields
        )

    def relocate(self, err: RecoveryRefused, base_offset: int = 0) -> RecoveryRefused:
        return locate(err, base_offset=base_offset, path=self.path, segment_id=self.segment_id)

    def incomplete(self, reason: str, offset: int, **fields: object) -> RecoveryRefused:
        """A torn tail: refused as itself in the highest segment, else sealed history broke."""
        if self.highest:
            return self.refuse("incomplete_tail", reason, offset, category="incomplete", **fields)
        return self.refuse(
            "continuity", "sealed_history_error", offset, category="corrupt", tail=reason,
            **fields,
        )


SCAN_WINDOW = 1 << 20  # bytes per native scan call: bounds what one call keeps resident
Release = Callable[[int, int], None]


def scan_segment(
    buf: Buffer,
    *,
    segment_id: int,
    store_id: bytes | None,
    highest: bool,
    path: str | None = None,
    budget: int = MAX_PAYLOAD,
    release: Release | None = None,
    window: int | None = None,
) -> SegmentScan:
    """Scan a whole segment file held in ``buf`` (bytes or an mmap).

    ``segment_id`` comes from the file name; ``store_id`` from the STORE marker (None only
    while classifying an uninitialized root); ``highest`` says whether this is the newest
    segment, the only one allowed to be active. ``budget`` is the record payload limit.

    The frames are walked in windows of about ``window`` bytes; after each window the
    running segment CRC takes in that window's bytes and ``release(start, end)`` is told
    that ``buf[start:end]`` will not be read again by the walk (a caller holding an mmap
    drops those pages), so a scan never needs the whole file resident. ``window`` defaults
    to ``SCAN_WINDOW``; the outcome never depends on it.
    """
    where = _Where(path, segment_id, highest)
    header = _scan_header(buf, where, store_id)
    size = len(buf)
    if size > MAX_SEGMENT_BYTES:
        raise where.refuse("physical_corruption", "segment_too_large", 0, size=size,
                           limit=MAX_SEGMENT_BYTES, category="corrupt")
    window = max(window or SCAN_WINDOW, FOOTER_SIZE)
    records, stop_offset, stop, crc = _walk_frames(buf, header.first_sequence, budget,
                                                   release, window)
    if len(records) > MAX_RECORDS:
        raise where.refuse("physical_corruption", "record_count_limit", stop_offset,
                           count=len(records), limit=MAX_RECORDS, category="corrupt")
    if stop == "end":
        state = _end_of_records(where, size)
    elif stop == "sequence":
        raise _sequence_error(buf, where, stop_offset, header.first_sequence + len(records))
    else:
        state = _tail(buf, where, header, records, stop_offset, budget, crc)
    return SegmentScan(
        header.segment_id, header.first_sequence, header.store_id, state, records, stop_offset,
        size, crc,
    )


def _walk_frames(
    buf: Buffer, first_sequence: int, budget: int, release: Release | None, window: int
) -> tuple[RecordTable, int, str, int]:
    """``(records, stop_offset, stop, crc of [0:stop_offset))`` of the frames after the header.

    Each native call covers ``[offset, end)`` with ``end`` at least one window past
    ``offset`` and past the whole frame that starts there (by its declared length), or
    the file end. A frame refused at ``offset`` itself was therefore judged with every
    byte it can claim, exactly as in one whole-file call; a refusal further in may only
    be a frame crossing ``end``, so the next call starts there and judges it again.
    """
    size = len(buf)
    view = memoryview(buf)
    try:
        crc = _native.crc32c(view[:HEADER_SIZE])
        records = RecordTable(first_sequence)
        offset = HEADER_SIZE
        while True:
            end = min(size, max(offset + window, offset + _declared_frame(view, offset)))
            *columns, stop_offset, stop = _native.scan_record_columns(
                buf, offset, end, budget, first_sequence + len(records))
            records.extend(*columns)
            crc = _native.crc32c(view[offset:stop_offset], crc)
            if release is not None:
                release(offset, stop_offset)
            if end == size or stop == "sequence" or (stop != "end" and stop_offset == offset):
                return records, stop_offset, stop, crc
            if first_sequence + len(records) > MAX_SEQUENCE:  # no sequence left for a frame
                return records, stop_offset, _past_last_sequence(buf, stop_offset, budget), crc
            offset = stop_offset
    finally:
        view.release()


def _past_last_sequence(buf: Buffer, offset: int, budget: int) -> str:
    """The stop at ``offset`` after sequence 2^64-1: any valid frame is out of sequence."""
    end = min(len(buf), offset + max(FOOTER_SIZE, _declared_frame(memoryview(buf), offset)))
    found, _, stop = _native.scan_records(buf, offset, end, budget, 1)
    return "sequence" if found or stop == "sequence" else stop


def _declared_frame(view: memoryview, offset: int) -> int:
    """28 + the payload length a frame at ``offset`` declares (0 when the field is cut off)."""
    if len(view) - offset < 20:
        return 0
    return 28 + int.from_bytes(view[offset + 16:offset + 20], "big")


def _scan_header(buf: Buffer, where: _Where, store_id: bytes | None) -> SegmentHeader:
    try:
        return decode_header(buf, where.segment_id, store_id)
    except RecoveryRefused as err:
        if err.extra.get("category") == "incomplete":
            raise where.incomplete("incomplete_segment_header", 0, available=len(buf)) from None
        raise where.relocate(err) from None


def _end_of_records(where: _Where, size: int) -> str:
    """Clean EOF at a record boundary: an active segment, legal only as the highest."""
    if not where.highest:
        raise where.refuse("continuity", "sealed_history_error", size, category="corrupt",
                           tail="active")
    if size > MAX_ACTIVE_BYTES:
        raise where.refuse("physical_corruption", "active_segment_too_large", 0, size=size,
                           limit=MAX_ACTIVE_BYTES, category="corrupt")
    return "active"


def _sequence_error(buf: Buffer, where: _Where, offset: int, expected: int) -> RecoveryRefused:
    found = decode_record(buf, offset).sequence  # the scanner already checked the frame
    return where.refuse("continuity", "sequence", offset, sequence=found, expected=expected,
                        found=found, category="corrupt")


def _tail(
    buf: Buffer, where: _Where, header: SegmentHeader, records: RecordTable, offset: int,
    budget: int, segment_crc: int,
) -> str:
    """Classify what stopped the record walk at boundary ``offset``: a footer or a refusal."""
    remaining = len(buf) - offset
    lead = bytes(buf[offset : offset + 4])
    if remaining < 4:
        if lead == b"TAY"[:remaining]:
            raise where.incomplete("ambiguous_short_tail", offset, available=remaining)
        raise where.refuse("physical_corruption", "invalid_magic", offset, category="corrupt")
    if lead == RECORD_MAGIC:
        raise _bad_record(buf, where, offset, budget)
    if lead != FOOTER_MAGIC:
        raise where.refuse("physical_corruption", "invalid_magic", offset, category="corrupt")
    if remaining < FOOTER_SIZE:
        raise where.incomplete("incomplete_footer", offset, available=remaining)
    if remaining > FOOTER_SIZE:
        raise where.refuse("physical_corruption", "trailing_bytes", offset, category="corrupt",
                           object="footer", length=remaining)
    try:
        decode_footer(buf[offset:], header, len(records), segment_crc, offset)
    except RecoveryRefused as err:
        raise where.relocate(err) from None
    return "sealed"


def _bad_record(buf: Buffer, where: _Where, offset: int, budget: int) -> RecoveryRefused:
    """The exact class of the frame the scanner refused at ``offset``."""
    try:
        decode_record(buf, offset, budget)
    except RecoveryRefused as err:
        if err.extra.get("category") == "incomplete":
            fields = {k: v for k, v in err.extra.items() if k != "category"}
            return where.incomplete("incomplete_record", offset, record_reason=err.reason,
                                    sequence=err.sequence, **fields)
        return where.relocate(err)
    raise AssertionError(f"native scanner refused a frame at {offset} that decodes cleanly")


# -- across segments ------------------------------------------------------------------------

def topology_check(scans: list[SegmentScan], paths: list[str] | None = None) -> Topology:
    """Check the segments of one store, in ID order, against each other (§2.7)."""
    if not scans:
        raise RecoveryRefused("discovery", "missing_history", category="corrupt")
    expected_first = 1
    for index, scan in enumerate(scans):
        path = paths[index] if paths else None
        if scan.segment_id != index + 1:
            raise RecoveryRefused("discovery", "segment_id_gap", path=path,
                                  segment_id=scan.segment_id, expected=index + 1,
                                  category="corrupt")
        if scan.store_id != scans[0].store_id:
            raise RecoveryRefused("physical_corruption", "store_id_mismatch", path=path,
                                  segment_id=scan.segment_id, category="corrupt")
        if scan.first_sequence != expected_first:
            raise RecoveryRefused("continuity", "first_sequence", path=path, offset=16,
                                  segment_id=scan.segment_id, expected=expected_first,
                                  found=scan.first_sequence, category="corrupt")
        if scan.state != "sealed" and index != len(scans) - 1:
            raise RecoveryRefused("continuity", "sealed_history_error", path=path,
                                  segment_id=scan.segment_id, tail="active", category="corrupt")
        expected_first = scan.next_sequence
    highest = scans[-1]
    exhausted = is_exhausted(highest.next_sequence, highest.segment_id, highest.state)
    return Topology(highest.next_sequence, highest.segment_id, highest.state, exhausted)


def is_exhausted(next_sequence: int, highest_id: int, highest_state: str) -> bool:
    """No record can ever be appended: sequences ran out, or a successor would need ID 2^64."""
    return next_sequence > MAX_SEQUENCE or (
        highest_state == "sealed" and highest_id == MAX_SEGMENT_ID
    )
