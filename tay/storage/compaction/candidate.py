"""Steps 3-6 of a compaction (storage.md §3.8): the private candidate directory.

``epochs/.tay-candidate-<hex>.tmp/`` is created and fsynced into ``epochs/``; its base
segments are created under their canonical names with ``O_EXCL`` (nobody else can see the
directory), filled with frames 1..N, sealed and fsynced, each hashed with SHA-256 as it is
written; then the MANIFEST (``O_EXCL``, write, fsync, close, fsync the directory) and the
empty tail segment ``k+1`` whose FIRST is ``N+1``. ``CandidateWriter.tail_appender`` adds
the online catch-up to that tail before publication (rolling at the rotation target like
the journal) and gives the ``Tail`` the journal then opens.

Every step goes through the ``fsio`` seam, so the crash matrix can stop after any write,
fsync or rename.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from tay import _native
from tay.storage.compaction.plan import BaseRecord
from tay.storage.formats.record import frame_size
from tay.storage.formats.segment import (
    FOOTER_SIZE, HEADER_SIZE, SegmentHeader, encode_footer, encode_header, segment_file_name,
)
from tay.storage.fsio import DIR_MODE, FILE_MODE, RealIO
from tay.storage.journal.rotation import rotation_needed
from tay.storage.journal.writer import Tail
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.manifest import BaseSegment, Manifest, Retention, encode_manifest

_WRITE_CHUNK = 1 << 20  # frames are written in pieces of about this size


@dataclass
class _OpenSegment:
    segment_id: int
    first_sequence: int
    fd: int
    size: int
    count: int = 0
    crc: int = 0
    digest: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0


@dataclass
class Candidate:
    """A written candidate: where it is and what its MANIFEST says."""

    path: str
    nonce: bytes
    manifest: Manifest
    manifest_bytes: bytes
    next_sequence: int  # of the tail
    tail_segment_id: int

    @property
    def segments_path(self) -> str:
        return os.path.join(self.path, v2_layout.SEGMENTS_DIR)


class CandidateWriter:
    """Writes one candidate epoch directory, step by step."""

    def __init__(self, io: RealIO, root: str, store_id: bytes, rotation_target: int) -> None:
        self.io = io
        self.root = root
        self.store_id = store_id
        self.rotation_target = rotation_target
        self.epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
        self.nonce = os.urandom(16)
        self.path = os.path.join(self.epochs, v2_layout.candidate_dir_name(self.nonce))
        self.segments = os.path.join(self.path, v2_layout.SEGMENTS_DIR)
        self.base: list[BaseSegment] = []
        self.next_sequence = 1

    # step 3 --------------------------------------------------------------------------
    def create_directories(self) -> None:
        io = self.io
        if not os.path.isdir(self.epochs):
            io.mkdir(self.epochs, DIR_MODE)
            io.fsync_dir(self.root)
        io.mkdir(self.path, DIR_MODE)
        io.fsync_dir(self.epochs)
        io.mkdir(self.segments, DIR_MODE)
        io.fsync_dir(self.path)

    # step 4 --------------------------------------------------------------------------
    def write_base(self, records: Iterable[BaseRecord]) -> list[BaseSegment]:
        """Frames 1..N in sealed segments 1..k (rolled at the rotation target)."""
        current: _OpenSegment | None = None
        for rtype, schema, payload in records:
            size = frame_size(len(payload))
            if current is None:
                current = self._open_base(1)
            elif rotation_needed(current.size + current.pending_bytes, size,
                                 self.rotation_target):
                self._seal(current)
                current = self._open_base(current.segment_id + 1)
            frame = _native.encode_records([(rtype, schema, self.next_sequence, payload)])
            current.pending.append(frame)
            current.pending_bytes += len(frame)
            current.count += 1
            self.next_sequence += 1
            if current.pending_bytes >= _WRITE_CHUNK:
                self._flush(current)
        if current is not None:
            self._seal(current)
        return self.base

    def _open_base(self, segment_id: int) -> _OpenSegment:
        path = os.path.join(self.segments, segment_file_name(segment_id))
        fd = self.io.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
        segment = _OpenSegment(segment_id, self.next_sequence, fd, 0)
        header = encode_header(segment_id, self.next_sequence, self.store_id)
        self._write(segment, header)
        return segment

    def _write(self, segment: _OpenSegment, data: bytes) -> None:
        self.io.write_all_at(segment.fd, data, segment.size)
        segment.size += len(data)
        segment.crc = _native.crc32c(data, segment.crc)
        segment.digest.update(data)

    def _flush(self, segment: _OpenSegment) -> None:
        if segment.pending:
            data = b"".join(segment.pending)
            segment.pending, segment.pending_bytes = [], 0
            self._write(segment, data)

    def _seal(self, segment: _OpenSegment) -> None:
        self._flush(segment)
        header = SegmentHeader(segment.segment_id, segment.first_sequence, self.store_id)
        footer = encode_footer(header, segment.count, segment.crc)
        self.io.write_all_at(segment.fd, footer, segment.size)
        segment.digest.update(footer)
        total = segment.size + FOOTER_SIZE
        if self.io.fstat(segment.fd).st_size != total:
            raise OSError(5, "base segment size mismatch", segment_file_name(segment.segment_id))
        self.io.fsync(segment.fd)
        self.io.close(segment.fd)
        self.base.append(BaseSegment(segment.segment_id, segment.first_sequence,
                                     segment.first_sequence + segment.count - 1, total,
                                     segment.digest.digest()))

    # step 5 --------------------------------------------------------------------------
    def write_manifest(self, *, epoch_id: bytes, captured_at: int, retention: Retention,
                       source_epoch_id: bytes | None, source_frontier: int,
                       source_segments: tuple[tuple[int, bytes], ...]) -> tuple[Manifest, bytes]:
        manifest = Manifest(
            store_id=self.store_id, epoch_id=epoch_id, captured_at=captured_at,
            base_segments=tuple(self.base), source_epoch_id=source_epoch_id,
            source_frontier=source_frontier, source_segments=source_segments,
            tail_first_sequence=self.next_sequence, tail_segment_id=len(self.base) + 1,
            terminal_retention=retention)
        raw = encode_manifest(manifest)
        path = os.path.join(self.path, v2_layout.MANIFEST_NAME)
        fd = self.io.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            self.io.write_all_at(fd, raw, 0)
            if self.io.fstat(fd).st_size != len(raw):
                raise OSError(5, "MANIFEST size mismatch", path)
            self.io.fsync(fd)
        finally:
            self.io.close(fd)
        self.io.fsync_dir(self.path)
        return manifest, raw

    # step 6 --------------------------------------------------------------------------
    def create_tail(self, manifest: Manifest, manifest_bytes: bytes) -> Candidate:
        tail_id = len(self.base) + 1
        path = os.path.join(self.segments, segment_file_name(tail_id))
        fd = self.io.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            self.io.write_all_at(fd, encode_header(tail_id, self.next_sequence, self.store_id), 0)
            if self.io.fstat(fd).st_size != HEADER_SIZE:
                raise OSError(5, "tail header size mismatch", path)
            self.io.fsync(fd)
        finally:
            self.io.close(fd)
        self.io.fsync_dir(self.segments)
        return Candidate(self.path, self.nonce, manifest, manifest_bytes, self.next_sequence,
                         tail_id)

    # step 6, online: the catch-up --------------------------------------------------------
    def tail_appender(self, candidate: Candidate) -> "TailAppender":
        """Appends the online catch-up to ``candidate``'s tail, in as many rounds as needed."""
        return TailAppender(self, candidate)


class TailAppender:
    """The candidate tail, open for the catch-up: ``append`` ``(type, schema, payload)``
    records with the sequences that follow the base (rolling at the rotation target like
    the journal), ``sync`` them, and ``finish`` (fsync, close) to get the ``Tail`` the
    journal opens. Rounds may run in the compaction process before the switch; the switch appends
    the rest."""

    def __init__(self, writer: CandidateWriter, candidate: Candidate) -> None:
        self.writer = writer
        self.io = writer.io
        self.store_id = writer.store_id
        self.sequence = candidate.next_sequence
        self.appended = 0
        fd = self.io.open(self._path(candidate.tail_segment_id), os.O_RDWR)
        self.segment = _OpenSegment(candidate.tail_segment_id, candidate.next_sequence, fd,
                                    HEADER_SIZE)
        self.segment.crc = _native.crc32c(encode_header(candidate.tail_segment_id,
                                                        candidate.next_sequence, self.store_id))

    def _path(self, segment_id: int) -> str:
        return os.path.join(self.writer.segments, segment_file_name(segment_id))

    def append(self, records: Sequence[tuple[int, int, bytes]]) -> None:
        target = self.writer.rotation_target
        chunk: list[tuple[int, int, int, bytes]] = []
        size = self.segment.size
        for rtype, schema, payload in records:
            frame = frame_size(len(payload))
            if rotation_needed(size, frame, target):
                self._write(chunk)
                chunk = []
                self._roll()
                size = self.segment.size
            chunk.append((rtype, schema, self.sequence, payload))
            self.sequence += 1
            size += frame
            if len(chunk) >= 4096:
                self._write(chunk)
                chunk = []
        self._write(chunk)
        self.appended += len(records)

    def _write(self, chunk: list[tuple[int, int, int, bytes]]) -> None:
        if chunk:
            self.writer._write(self.segment, _native.encode_records(chunk))
            self.segment.count += len(chunk)

    def _roll(self) -> None:
        """Seal the full tail segment and continue in its successor."""
        segment = self.segment
        header = SegmentHeader(segment.segment_id, segment.first_sequence, self.store_id)
        self.io.write_all_at(segment.fd, encode_footer(header, segment.count, segment.crc),
                             segment.size)
        self.io.fsync(segment.fd)
        self.io.close(segment.fd)
        successor = segment.segment_id + 1
        fd = self.io.open(self._path(successor), os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
        self.segment = _OpenSegment(successor, self.sequence, fd, 0)
        self.writer._write(self.segment, encode_header(successor, self.sequence, self.store_id))

    def sync(self) -> None:
        self.io.fsync(self.segment.fd)

    def finish(self) -> Tail:
        segment = self.segment
        self.io.fsync(segment.fd)
        fd, segment.fd = segment.fd, -1
        self.io.close(fd)
        self.io.fsync_dir(self.writer.segments)
        return Tail(store_id=self.store_id, segment_id=segment.segment_id,
                    first_sequence=segment.first_sequence, size=segment.size,
                    record_count=segment.count, segment_crc=segment.crc, sealed=False,
                    next_sequence=self.sequence)

    def close(self) -> None:
        """Give up (the compaction failed): the candidate is removed by the caller."""
        if self.segment.fd >= 0:
            try:
                self.io.close(self.segment.fd)
            except OSError:
                pass
            self.segment.fd = -1
