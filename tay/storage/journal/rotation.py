"""Segment rotation (§2.8, R0-R7): when to rotate, sealing the active segment, and
publishing its empty successor.

The functions take the writer's state explicitly and raise ``OSError`` on any mismatch;
``Journal`` runs them under its guard, so a failure poisons the writer for good.
"""

from __future__ import annotations

import os

from tay import _native
from tay.storage.fsio import RealIO
from tay.storage.journal.setup import argument_refusal, fsync_file, publish_staged
from tay.storage.formats.segment import (
    FOOTER_SIZE,
    HEADER_SIZE,
    SegmentHeader,
    encode_footer,
    encode_header,
    segment_file_name,
    staging_file_name,
)

DEFAULT_ROTATION_TARGET = 67_108_864
MIN_ROTATION_TARGET = 16_777_352  # header + largest frame + footer
MAX_ROTATION_TARGET = 1_073_741_824
_SEAL_READ = 1 << 20  # bytes per read when the seal re-checks the file's CRC


def rotation_needed(active_size: int, frame_size: int, rotation_target: int) -> bool:
    """§2.8: seal before a frame that would leave no room for the footer within the target;
    an empty active segment (header only) never rotates."""
    return active_size != HEADER_SIZE and active_size + frame_size + FOOTER_SIZE > rotation_target


def check_rotation_target(value: int, *, allow_below_minimum_for_tests: bool = False) -> int:
    """Validate ``rotation_target_bytes`` (§2.8). The test escape hatch lowers only the floor."""
    floor = 44 + 28 + FOOTER_SIZE if allow_below_minimum_for_tests else MIN_ROTATION_TARGET
    if not isinstance(value, int) or not floor <= value <= MAX_ROTATION_TARGET:
        raise argument_refusal("rotation_target_bytes_out_of_range", value=value, minimum=floor,
                               maximum=MAX_ROTATION_TARGET)
    return value


def seal_segment(io: RealIO, fd: int, path: str, header: SegmentHeader, size: int,
                 record_count: int, segment_crc: int) -> None:
    """R0-R2: check the file is exactly what was written, append the footer, fsync."""
    if io.fstat(fd).st_size != size:
        raise OSError(5, "segment size changed before seal", path)
    if file_crc(io, fd, size) != segment_crc:
        raise OSError(5, "segment bytes changed before seal", path)
    io.write_all_at(fd, encode_footer(header, record_count, segment_crc), size)  # R1
    if io.fstat(fd).st_size != size + FOOTER_SIZE:
        raise OSError(5, "size after footer write does not match", path)
    io.fsync(fd)  # R2


def file_crc(io: RealIO, fd: int, size: int) -> int:
    """CRC32C of the file's first ``size`` bytes, read in bounded pieces (a segment may be
    up to 1 GiB; the writer never holds more than one piece)."""
    crc, offset = 0, 0
    while offset < size:
        piece = io.read_at(fd, min(_SEAL_READ, size - offset), offset)
        if not piece:
            raise OSError(5, "segment shorter than its recorded size")
        crc = _native.crc32c(piece, crc)
        offset += len(piece)
    return crc


def publish_successor(io: RealIO, segments_dir: str, sealed_id: int, first_sequence: int,
                      store_id: bytes) -> tuple[int, bytes]:
    """R3-R7: publish the empty segment after ``sealed_id``; return its writable fd and header."""
    fsync_file(io, os.path.join(segments_dir, segment_file_name(sealed_id)))  # R3
    successor = sealed_id + 1
    header = encode_header(successor, first_sequence, store_id)
    publish_staged(io, segments_dir, staging_file_name(successor, os.urandom(16)),  # R4, R5
                   segment_file_name(successor), header)
    path = os.path.join(segments_dir, segment_file_name(successor))
    fd = io.open(path, os.O_RDWR)  # R7 (after the R6 check below)
    if io.fstat(fd).st_size != HEADER_SIZE or io.read_at(fd, HEADER_SIZE, 0) != header:
        io.close(fd)
        raise OSError(5, "published successor is not the expected empty segment", path)
    return fd, header
