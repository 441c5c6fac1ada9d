"""The writer's side of the segment ledger (``tay.storage.formats.segment_ledger``).

``LedgerWriter.open`` (at activation and at bootstrap) opens ``SEGMENT-LEDGER``, creating
it (0600, then the root is fsynced) if the store has none yet: a store made by upstream
Tay or an older tay, or a crash between STORE's publication and the ledger's creation. It
drops a torn final append and records the current highest segment if the ledger lags
behind it. ``record`` appends one entry and fsyncs it; the journal calls it right after a
successor is published (rename + directory fsync) and before the first record goes into
it, so the ledger never names a segment that is not durably on disk, and never lags behind
a segment that holds records.
"""

from __future__ import annotations

import os

from tay.storage.formats.segment_ledger import (
    ENTRY_SIZE,
    LEDGER_FILE_NAME,
    V1_EPOCH,
    LedgerEntry,
    decode_ledger,
    encode_entry,
)
from tay.storage.fsio import FILE_MODE, RealIO


class LedgerWriter:
    """An open ledger of one store and one segments directory (``epoch_id``)."""

    def __init__(self, io: RealIO, path: str, fd: int, size: int, store_id: bytes,
                 epoch_id: bytes, highest_id: int) -> None:
        self.io = io
        self.path = path
        self.fd = fd
        self.size = size
        self.store_id = store_id
        self.epoch_id = epoch_id
        self.highest_id = highest_id  # the newest segment ID recorded for epoch_id

    @classmethod
    def open(cls, io: RealIO, root: str, store_id: bytes,
             epoch_id: bytes = V1_EPOCH) -> "LedgerWriter":
        """Open (or create) the ledger of ``root`` and drop a torn final append.

        Raises ``OSError`` for I/O failures and ``RecoveryRefused`` for a damaged ledger
        (recovery's preflight refuses the same bytes first)."""
        path = os.path.join(root, LEDGER_FILE_NAME)
        created = False
        try:
            fd = io.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = io.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
            created = True
        try:
            size = io.fstat(fd).st_size
            ledger = decode_ledger(io.read_at(fd, size, 0) if size else b"", path)
            if ledger.torn_bytes:  # its segment is on disk already; the entry is redone
                io.truncate(fd, ledger.valid_size)
                io.fsync(fd)
            if created:
                io.fsync(fd)
                io.fsync_dir(root)
        except BaseException:
            io.close(fd)
            raise
        newest = ledger.highest(epoch_id)
        return cls(io, path, fd, ledger.valid_size, store_id, epoch_id,
                   newest.segment_id if newest is not None else 0)

    def record(self, segment_id: int, first_sequence: int) -> None:
        """Append the entry of ``segment_id`` and fsync it (no-op if already recorded)."""
        if segment_id <= self.highest_id:
            return
        entry = encode_entry(LedgerEntry(self.store_id, self.epoch_id, segment_id,
                                         first_sequence))
        self.io.write_all_at(self.fd, entry, self.size)
        self.io.fsync(self.fd)
        self.size += ENTRY_SIZE
        self.highest_id = segment_id

    def close(self) -> None:
        if self.fd >= 0:
            self.io.close(self.fd)
            self.fd = -1
