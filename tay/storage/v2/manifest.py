"""The Store-v2 MANIFEST (storage.md §3.3-3.4): its ten-key body, terminal retention, and
the selection check that binds STORE, STORE-V2, CURRENT and MANIFEST together.

A framing fault is ``physical_corruption``; a body fault is ``invalid_payload`` whose
``reason`` names the manifest key (for example ``terminal_retention``).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from tay._frozen import Frozen, LazyPattern, set_field
from tay.failures import RecoveryRefused
from tay.storage.formats import value
from tay.storage.events.definition import (
    TIME_MAX, U64_MAX, check_exact_keys, decode_value, invalid, is_unsigned,
)
from tay.storage.v2.markers import check_crc, corrupt, decode_current, decode_store_v2, seal

MANIFEST_MAX = 16 * 1024 * 1024
MANIFEST_BODY_MAX = MANIFEST_MAX - 16
HOURS_MAX = (2**63 - 1) // 3_600_000
MINUTES_MAX = (2**63 - 1) // 60_000
ONE_HOUR_MS = 3_600_000
SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX = 64, 1 << 30


# ---- terminal retention (§3.4 as widened by the seeds) ------------------------------------

class Retention(Frozen):
    """``unit`` is "infinity", "hours" or "minutes"; ``count`` is None for infinity."""

    __slots__ = ("unit", "count")
    unit: str
    count: int | None

    def __init__(self, unit: str, count: int | None = None) -> None:
        set_field(self, "unit", unit)
        set_field(self, "count", count)

    @property
    def duration_ms(self) -> int | None:
        """The durable duration (0 is the full-purge marker); None keeps jobs forever."""
        if self.unit == "infinity":
            return None
        return self.count * (ONE_HOUR_MS if self.unit == "hours" else 60_000)

    @property
    def runtime_ms(self) -> int | None:
        """The policy to run with: a zero marker is normalized to the one-hour minimum."""
        duration = self.duration_ms
        return None if duration is None else max(duration, ONE_HOUR_MS)

    def expires(self, terminal_at: int, captured_at: int) -> bool:
        """Whether a terminal job expires at ``captured_at`` (equality included)."""
        duration = self.duration_ms
        return duration is not None and captured_at >= duration and (
            terminal_at <= captured_at - duration)

    def to_value(self) -> Any:
        return "infinity" if self.unit == "infinity" else {self.unit: self.count}


INFINITY = Retention("infinity")
_RETENTION_TEXT = LazyPattern(r"^(\d+)([mhd])$")  # compiled when the ASCII form below is not it


def parse_retention(text: str) -> Retention:
    """``infinity``, ``<N>m``, ``<N>h`` or ``<N>d`` (days are stored as hours); ValueError
    names what is wrong. ``0h``/``0m`` is the full purge (runs and is stored as one hour)."""
    text = str(text).strip()
    if text == "infinity":
        return INFINITY
    digits, unit = text[:-1], text[-1:]
    if not (unit in ("m", "h", "d") and digits.isascii() and digits.isdigit()):
        match = _RETENTION_TEXT.match(text)  # e.g. non-ASCII digits, which \d accepts
        if match is None:
            raise ValueError(f"{text!r} must be infinity or a whole number followed by m, h "
                             "or d")
        digits, unit = match.group(1), match.group(2)
    count = int(digits)
    unit, count = {"m": ("minutes", count), "h": ("hours", count), "d": ("hours", count * 24)}[unit]
    limit = HOURS_MAX if unit == "hours" else MINUTES_MAX
    if count > limit:
        raise ValueError(f"{text!r} is longer than the largest retention ({limit} {unit})")
    return Retention(unit, count)


def decode_retention(obj: Any) -> Retention:
    """A retention Value: "infinity", {"hours": 0..HOURS_MAX} or {"minutes": 0..MINUTES_MAX}."""
    if obj == "infinity" and type(obj) is str:
        return INFINITY
    if type(obj) is dict and len(obj) == 1:
        ((unit, count),) = obj.items()
        limit = {"hours": HOURS_MAX, "minutes": MINUTES_MAX}.get(unit)
        if limit is not None and is_unsigned(count) and count <= limit:
            return Retention(unit, count)
    raise invalid("terminal_retention", "terminal_retention", value=repr(obj))


# ---- MANIFEST ----------------------------------------------------------------------

MANIFEST_KEYS = frozenset({
    "base_segments", "captured_at", "epoch_id", "source_epoch_id", "source_frontier",
    "source_segments", "store_id", "tail_first_sequence", "tail_segment_id",
    "terminal_retention",
})
BASE_KEYS = frozenset({"bytes", "digest", "first_sequence", "id", "last_sequence"})
SOURCE_KEYS = frozenset({"digest", "id"})


class BaseSegment(Frozen):
    __slots__ = ("id", "first_sequence", "last_sequence", "bytes", "digest")
    id: int
    first_sequence: int
    last_sequence: int
    bytes: int
    digest: bytes

    def __init__(self, id: int, first_sequence: int, last_sequence: int, bytes: int,
                 digest: bytes) -> None:
        set_field(self, "id", id)
        set_field(self, "first_sequence", first_sequence)
        set_field(self, "last_sequence", last_sequence)
        set_field(self, "bytes", bytes)
        set_field(self, "digest", digest)


class Manifest(Frozen):
    __slots__ = ("store_id", "epoch_id", "captured_at", "base_segments", "source_epoch_id",
                 "source_frontier", "source_segments", "tail_first_sequence", "tail_segment_id",
                 "terminal_retention")
    store_id: bytes
    epoch_id: bytes
    captured_at: int
    base_segments: tuple[BaseSegment, ...]
    source_epoch_id: bytes | None
    source_frontier: int
    source_segments: tuple[tuple[int, bytes], ...]   # (id, digest)
    tail_first_sequence: int
    tail_segment_id: int
    terminal_retention: Retention

    def __init__(self, store_id: bytes, epoch_id: bytes, captured_at: int,
                 base_segments: tuple[BaseSegment, ...], source_epoch_id: bytes | None,
                 source_frontier: int, source_segments: tuple[tuple[int, bytes], ...],
                 tail_first_sequence: int, tail_segment_id: int,
                 terminal_retention: Retention) -> None:
        set_field(self, "store_id", store_id)
        set_field(self, "epoch_id", epoch_id)
        set_field(self, "captured_at", captured_at)
        set_field(self, "base_segments", base_segments)
        set_field(self, "source_epoch_id", source_epoch_id)
        set_field(self, "source_frontier", source_frontier)
        set_field(self, "source_segments", source_segments)
        set_field(self, "tail_first_sequence", tail_first_sequence)
        set_field(self, "tail_segment_id", tail_segment_id)
        set_field(self, "terminal_retention", terminal_retention)

    def body(self) -> dict:
        return {
            "base_segments": [{"bytes": b.bytes, "digest": b.digest,
                               "first_sequence": b.first_sequence, "id": b.id,
                               "last_sequence": b.last_sequence} for b in self.base_segments],
            "captured_at": self.captured_at, "epoch_id": self.epoch_id,
            "source_epoch_id": self.source_epoch_id, "source_frontier": self.source_frontier,
            "source_segments": [{"digest": d, "id": i} for i, d in self.source_segments],
            "store_id": self.store_id, "tail_first_sequence": self.tail_first_sequence,
            "tail_segment_id": self.tail_segment_id,
            "terminal_retention": self.terminal_retention.to_value(),
        }


def _manifest_field(condition: bool, key: str, detail: str) -> None:
    if not condition:
        raise invalid(key, key, detail=detail)


def _id_field(obj: Any, key: str, nullable: bool = False) -> bytes | None:
    if obj is None and nullable:
        return None
    _manifest_field(type(obj) is bytes and len(obj) == 16 and obj != bytes(16), key,
                    "expected 16 nonzero bytes")
    return obj


def _digest(obj: Any, key: str) -> bytes:
    _manifest_field(type(obj) is bytes and len(obj) == 32, key, "expected a 32-byte digest")
    return obj


def _base_segments(obj: Any) -> tuple[BaseSegment, ...]:
    key = "base_segments"
    _manifest_field(type(obj) is list, key, "expected a list")
    segments, next_first = [], 1
    for index, entry in enumerate(obj, start=1):
        check_exact_keys(entry, BASE_KEYS, f"{key}[{index}]")
        segment = BaseSegment(entry["id"], entry["first_sequence"], entry["last_sequence"],
                              entry["bytes"], _digest(entry["digest"], key))
        _manifest_field(is_unsigned(segment.id) and segment.id == index, key, "ids 1..k")
        _manifest_field(is_unsigned(segment.first_sequence)
                        and segment.first_sequence == next_first, key, "first_sequence chain")
        _manifest_field(is_unsigned(segment.last_sequence)
                        and segment.last_sequence >= segment.first_sequence, key,
                        "last_sequence >= first_sequence")
        _manifest_field(is_unsigned(segment.bytes)
                        and SEGMENT_BYTES_MIN <= segment.bytes <= SEGMENT_BYTES_MAX, key,
                        "bytes 64..1 GiB")
        segments.append(segment)
        next_first = segment.last_sequence + 1
    return tuple(segments)


def _source_segments(obj: Any) -> tuple[tuple[int, bytes], ...]:
    key = "source_segments"
    _manifest_field(type(obj) is list, key, "expected a list")
    out = []
    for index, entry in enumerate(obj, start=1):
        check_exact_keys(entry, SOURCE_KEYS, f"{key}[{index}]")
        _manifest_field(is_unsigned(entry["id"]) and entry["id"] == index, key, "ids 1..m")
        out.append((index, _digest(entry["digest"], key)))
    return tuple(out)


def manifest_from_body(body: Any) -> Manifest:
    """Validate a decoded MANIFEST body (exactly the 10 keys and their domains)."""
    check_exact_keys(body, MANIFEST_KEYS, "manifest")
    base = _base_segments(body["base_segments"])
    tail_first = base[-1].last_sequence + 1 if base else 1
    _manifest_field(is_unsigned(body["captured_at"]) and body["captured_at"] <= TIME_MAX,
                    "captured_at", "expected a Time")
    _manifest_field(is_unsigned(body["source_frontier"]), "source_frontier", "expected U")
    _manifest_field(body["tail_first_sequence"] == tail_first and tail_first <= U64_MAX
                    and is_unsigned(body["tail_first_sequence"]), "tail_first_sequence",
                    f"expected {tail_first}")
    _manifest_field(is_unsigned(body["tail_segment_id"])
                    and body["tail_segment_id"] == len(base) + 1, "tail_segment_id",
                    f"expected {len(base) + 1}")
    return Manifest(
        store_id=_id_field(body["store_id"], "store_id"),
        epoch_id=_id_field(body["epoch_id"], "epoch_id"),
        captured_at=body["captured_at"], base_segments=base,
        source_epoch_id=_id_field(body["source_epoch_id"], "source_epoch_id", nullable=True),
        source_frontier=body["source_frontier"],
        source_segments=_source_segments(body["source_segments"]),
        tail_first_sequence=tail_first, tail_segment_id=len(base) + 1,
        terminal_retention=decode_retention(body["terminal_retention"]),
    )


def decode_manifest(buf: bytes, limits: value.DecodeLimits | None = None) -> Manifest:
    """Decode a whole MANIFEST file: size, CRC, header, L, then the body."""
    if not 16 <= len(buf) <= MANIFEST_MAX:
        raise corrupt("length", "MANIFEST", actual=len(buf))
    check_crc(buf, "MANIFEST")
    if buf[:4] != b"TAYM" or buf[4] != 1 or buf[5:8] != b"\x00\x00\x00":
        raise corrupt("header", "MANIFEST")
    (length,) = struct.unpack_from(">I", buf, 8)
    if length != len(buf) - 16 or length > MANIFEST_BODY_MAX:
        raise corrupt("body_length", "MANIFEST", declared=length, actual=len(buf) - 16)
    return manifest_from_body(decode_value(memoryview(buf)[12:-4], limits, "manifest"))


def encode_manifest(manifest: Manifest) -> bytes:
    body = value.encode(manifest.body())
    manifest_from_body(value.decode(body))  # never write what we would refuse to read
    return seal(b"TAYM\x01\x00\x00\x00" + struct.pack(">I", len(body)) + body)


def verify_selection(store_id: bytes, marker: bytes, current: bytes,
                     manifest_file: bytes) -> Manifest:
    """§3.3: the v1 STORE id, STORE-V2, CURRENT and MANIFEST agree and the digest binds."""
    marker_id = decode_store_v2(marker)
    pointer = decode_current(current)
    manifest = decode_manifest(manifest_file)
    if not store_id == marker_id == pointer.store_id == manifest.store_id:
        raise RecoveryRefused("discovery", "store_id_mismatch", object="CURRENT")
    if manifest.epoch_id != pointer.epoch_id:
        raise RecoveryRefused("discovery", "epoch_id_mismatch", object="MANIFEST")
    if hashlib.sha256(manifest_file).digest() != pointer.manifest_digest:
        raise RecoveryRefused("discovery", "manifest_digest_mismatch", object="MANIFEST")
    return manifest


def durable_form(retention: Retention) -> Retention:
    """What a compaction persists: a zero (full purge) is stored as the one-hour minimum."""
    if retention.unit != "infinity" and retention.count == 0:
        return Retention("hours", 1)
    return retention
