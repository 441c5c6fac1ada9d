"""The segment ledger: a durable record of every segment the writer created, so that a
missing segment is noticed (docs/storage-format.md, "Segment ledger").

A v1 store cannot tell a deleted newest segment from one that was never created: after the
highest active segment is deleted, the sealed one before it looks like a crash between a
seal and its successor (storage.md §7 calls this "undetectable by design"). The ledger
closes that gap. It is the root file ``SEGMENT-LEDGER``: an append-only sequence of 64-byte
entries, one per segment the writer created (or found as the highest when it opened the
store), each naming the store, the segments directory (an epoch; all zero for the v1 root
``segments/``), the segment's ID and its FIRST_SEQUENCE.

``"TAYL" | u8 version=1 | u8 flags=0 | u16 reserved=0 | STORE_ID[16] | EPOCH_ID[16] |
u64 SEGMENT_ID | u64 FIRST_SEQUENCE | u32 reserved=0 | u32 CRC32C(bytes 0..59)``

Upstream readers tolerate the file: it is a regular file in the root (which ignores
unrelated regular files in an initialized store, v1 and v2 alike) whose name has no
``.tay``; it is created only after STORE exists.
"""

from __future__ import annotations

import struct
from tay._frozen import Frozen, set_field

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats.store_marker import (
    ZERO_ID,
    check_fixed_object,
    check_store_id,
    refuse_object,
)

LEDGER_FILE_NAME = "SEGMENT-LEDGER"
LEDGER_MAGIC = b"TAYL"
ENTRY_SIZE = 64  # a power of two: an aligned entry never straddles a page or a sector
V1_EPOCH = ZERO_ID  # the v1 root's segments/ directory
MAX_U64 = 2**64 - 1
_ENTRY = struct.Struct(">4sBBH16s16sQQI")  # everything but the CRC (60 bytes)
_CRC = struct.Struct(">I")


class LedgerEntry(Frozen):
    __slots__ = ("store_id", "epoch_id", "segment_id", "first_sequence")
    store_id: bytes
    epoch_id: bytes
    segment_id: int
    first_sequence: int

    def __init__(self, store_id: bytes, epoch_id: bytes, segment_id: int,
                 first_sequence: int) -> None:
        set_field(self, "store_id", store_id)
        set_field(self, "epoch_id", epoch_id)
        set_field(self, "segment_id", segment_id)
        set_field(self, "first_sequence", first_sequence)


class Ledger(Frozen):
    """A decoded ledger file: its complete entries and the bytes of a torn final append."""

    __slots__ = ("entries", "torn_bytes")
    entries: tuple[LedgerEntry, ...]
    torn_bytes: int  # a final entry cut short (its segment is on disk: the ledger lags)

    def __init__(self, entries: tuple[LedgerEntry, ...], torn_bytes: int = 0) -> None:
        set_field(self, "entries", entries)
        set_field(self, "torn_bytes", torn_bytes)

    @property
    def valid_size(self) -> int:
        return len(self.entries) * ENTRY_SIZE

    def highest(self, epoch_id: bytes = V1_EPOCH) -> LedgerEntry | None:
        """The newest entry for ``epoch_id``'s segments directory (None: none recorded)."""
        found = [entry for entry in self.entries if entry.epoch_id == epoch_id]
        return found[-1] if found else None


def encode_entry(entry: LedgerEntry) -> bytes:
    """The 64 bytes of one entry."""
    if len(entry.store_id) != 16 or entry.store_id == ZERO_ID or len(entry.epoch_id) != 16:
        raise ValueError("STORE_ID must be 16 nonzero bytes and EPOCH_ID 16 bytes")
    if not (1 <= entry.segment_id <= MAX_U64 and 1 <= entry.first_sequence <= MAX_U64):
        raise ValueError("SEGMENT_ID and FIRST_SEQUENCE must be 1..2^64-1")
    body = _ENTRY.pack(LEDGER_MAGIC, 1, 0, 0, entry.store_id, entry.epoch_id,
                       entry.segment_id, entry.first_sequence, 0)
    return body + _CRC.pack(_native.crc32c(body))


def decode_entry(buf: bytes | memoryview, offset: int = 0) -> LedgerEntry:
    """One entry (exactly 64 bytes), in the fixed-object decode order of STORE and the
    segment header: magic, version, size, CRC, flags, reserved, then the field domains."""
    check_fixed_object(buf, LEDGER_MAGIC, ENTRY_SIZE, "ledger_entry", offset)
    _, _, _, _, store_id, epoch_id, segment_id, first, reserved = _ENTRY.unpack_from(buf)
    if reserved != 0:
        raise refuse_object("corrupt", "reserved_bytes", "ledger_entry", offset + 56)
    check_store_id(store_id, "ledger_entry", offset + 8)
    if segment_id == 0:
        raise refuse_object("corrupt", "invalid_segment_id", "ledger_entry", offset + 40)
    if first == 0:
        raise refuse_object("corrupt", "invalid_first_sequence", "ledger_entry", offset + 48)
    return LedgerEntry(store_id, epoch_id, segment_id, first)


def decode_ledger(buf: bytes | memoryview, path: str | None = None) -> Ledger:
    """Every entry of a ledger file. A final entry cut short (a torn append) is tolerated
    when its bytes are a prefix of the magic or longer; anything else is refused
    (``physical_corruption``, naming ``path`` and the entry's offset). Per directory
    (epoch), segment IDs must strictly increase (``ledger_order``)."""
    entries: list[LedgerEntry] = []
    complete = len(buf) - len(buf) % ENTRY_SIZE
    newest: dict[bytes, int] = {}
    try:
        for offset in range(0, complete, ENTRY_SIZE):
            entry = decode_entry(buf[offset:offset + ENTRY_SIZE], offset)
            if entry.segment_id <= newest.get(entry.epoch_id, 0):
                raise refuse_object("corrupt", "ledger_order", "ledger_entry", offset,
                                    segment_id=entry.segment_id,
                                    previous=newest[entry.epoch_id])
            newest[entry.epoch_id] = entry.segment_id
            entries.append(entry)
        torn = bytes(buf[complete:])
        if torn and torn[:4] != LEDGER_MAGIC[: len(torn[:4])]:
            raise refuse_object("corrupt", "invalid_magic", "ledger_entry", complete)
    except RecoveryRefused as err:
        kind = "physical_corruption" if err.kind == "incomplete_tail" else err.kind
        raise RecoveryRefused(kind, err.reason, path=path, offset=err.offset,
                              **err.extra) from None
    return Ledger(tuple(entries), len(buf) - complete)


def check_segments(ledger: Ledger, store_id: bytes, epoch_id: bytes,
                   first_sequences: dict[int, int], *, ledger_path: str,
                   segment_path) -> None:  # type: ignore[no-untyped-def]
    """Refuse a store whose segments directory lost or replaced a segment the ledger
    recorded: ``first_sequences`` maps every segment ID on disk to its FIRST_SEQUENCE.

    - an entry of another store: ``discovery`` / ``ledger_store_mismatch``;
    - a recorded ID above the highest on disk: ``continuity`` / ``missing_segment``;
    - a recorded segment whose FIRST_SEQUENCE differs: ``continuity`` / ``segment_replaced``.
    """
    highest_on_disk = max(first_sequences, default=0)
    for entry in ledger.entries:
        if entry.store_id != store_id:
            raise RecoveryRefused("discovery", "ledger_store_mismatch", path=ledger_path,
                                  stage="preflight", ledger_store_id=entry.store_id.hex(),
                                  store_id=store_id.hex())
        if entry.epoch_id != epoch_id:
            continue
        if entry.segment_id > highest_on_disk:
            raise RecoveryRefused(
                "continuity", "missing_segment", path=segment_path(entry.segment_id),
                segment_id=entry.segment_id, stage="preflight", ledger=ledger_path,
                highest_on_disk=highest_on_disk,
                remedy="a segment the writer created is gone: restore the whole data "
                       "directory from a cold backup (never single segment files)")
        found = first_sequences[entry.segment_id]
        if found != entry.first_sequence:
            raise RecoveryRefused(
                "continuity", "segment_replaced", path=segment_path(entry.segment_id),
                segment_id=entry.segment_id, stage="preflight", ledger=ledger_path,
                expected_first_sequence=entry.first_sequence, found_first_sequence=found)
