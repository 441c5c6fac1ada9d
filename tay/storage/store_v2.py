"""Store-v2 objects (storage.md §3.2-3.5): the STORE-V2, ADOPTION and CURRENT markers, the
MANIFEST with its terminal retention, and the JOB_SNAPSHOT_V2 (7,1) / JOB_MUTATION_V2 (8,1)
record payloads with their validity and credibility rules.

Fixed objects are checked in the order length, CRC, magic/version/reserved, field domains;
a framing fault is ``physical_corruption``, a body fault ``invalid_payload`` whose ``reason``
names the manifest key (for example ``terminal_retention``). A mutation is checked locally
and then rebuilt as the Event-v1 event it stands for, so the one transition function
(``tay.storage.transitions.apply`` with S = new_revision) replays it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage import value
from tay.storage.definition import (
    PayloadRefused, TIME_MAX, U64_MAX, check_exact_keys, check_optional, check_time,
    check_unsigned, decode_value, invalid, is_unsigned, validate_definition,
)

MARKER_SIZE = 28
CURRENT_SIZE = 76
MANIFEST_MAX = 16 * 1024 * 1024
MANIFEST_BODY_MAX = MANIFEST_MAX - 16
HOURS_MAX = (2**63 - 1) // 3_600_000
MINUTES_MAX = (2**63 - 1) // 60_000
ONE_HOUR_MS = 3_600_000
SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX = 64, 1 << 30


def _corrupt(reason: str, obj: str, **extra: Any) -> RecoveryRefused:
    return RecoveryRefused("physical_corruption", reason, object=obj, **extra)


def _check_fixed(buf: bytes, magic: bytes, size: int, obj: str) -> None:
    """Length, then CRC, then magic / version / reserved (§3.2)."""
    if len(buf) != size:
        raise _corrupt("length", obj, expected=size, actual=len(buf))
    if _native.crc32c(buf[:-4]) != int.from_bytes(buf[-4:], "big"):
        raise _corrupt("checksum", obj)
    if buf[:4] != magic:
        raise _corrupt("magic", obj)
    if buf[4] != 1:
        raise _corrupt("version", obj, version=buf[4])
    if buf[5:8] != b"\x00\x00\x00":
        raise _corrupt("reserved", obj)


def _check_id(raw: bytes, obj: str, name: str) -> bytes:
    if raw == bytes(16):
        raise _corrupt(f"zero_{name}", obj)
    return raw


def _seal(body: bytes) -> bytes:
    return body + _native.crc32c(body).to_bytes(4, "big")


def _id16(raw: bytes, name: str) -> bytes:
    if type(raw) is not bytes or len(raw) != 16 or raw == bytes(16):
        raise ValueError(f"{name} must be 16 nonzero bytes")
    return raw


# ---- STORE-V2, ADOPTION, CURRENT -------------------------------------------------------

def encode_store_v2(store_id: bytes) -> bytes:
    return _seal(b"TAY2\x01\x00\x00\x00" + _id16(store_id, "store_id"))


def decode_store_v2(buf: bytes) -> bytes:
    """The STORE_ID of a STORE-V2 marker."""
    _check_fixed(buf, b"TAY2", MARKER_SIZE, "STORE-V2")
    return _check_id(bytes(buf[8:24]), "STORE-V2", "store_id")


def encode_adoption(nonce: bytes) -> bytes:
    return _seal(b"TAYA\x01\x00\x00\x00" + _id16(nonce, "nonce"))


def decode_adoption(buf: bytes) -> bytes:
    """The nonce of an ADOPTION intent (names ``epochs/legacy-<nonce>``)."""
    _check_fixed(buf, b"TAYA", MARKER_SIZE, "ADOPTION")
    return _check_id(bytes(buf[8:24]), "ADOPTION", "nonce")


@dataclass(frozen=True, slots=True)
class Current:
    store_id: bytes
    epoch_id: bytes
    manifest_digest: bytes


def encode_current(current: Current) -> bytes:
    if len(current.manifest_digest) != 32:
        raise ValueError("manifest_digest must be 32 bytes")
    return _seal(b"TAYC\x01\x00\x00\x00" + _id16(current.store_id, "store_id")
                 + _id16(current.epoch_id, "epoch_id") + current.manifest_digest)


def decode_current(buf: bytes) -> Current:
    _check_fixed(buf, b"TAYC", CURRENT_SIZE, "CURRENT")
    return Current(_check_id(bytes(buf[8:24]), "CURRENT", "store_id"),
                   _check_id(bytes(buf[24:40]), "CURRENT", "epoch_id"), bytes(buf[40:72]))


# ---- terminal retention (§3.4 as widened by the seeds) ------------------------------------

@dataclass(frozen=True, slots=True)
class Retention:
    """``unit`` is "infinity", "hours" or "minutes"; ``count`` is None for infinity."""

    unit: str
    count: int | None = None

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


@dataclass(frozen=True, slots=True)
class BaseSegment:
    id: int
    first_sequence: int
    last_sequence: int
    bytes: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class Manifest:
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
        raise _corrupt("length", "MANIFEST", actual=len(buf))
    if _native.crc32c(buf[:-4]) != int.from_bytes(buf[-4:], "big"):
        raise _corrupt("checksum", "MANIFEST")
    if buf[:4] != b"TAYM" or buf[4] != 1 or buf[5:8] != b"\x00\x00\x00":
        raise _corrupt("header", "MANIFEST")
    (length,) = struct.unpack_from(">I", buf, 8)
    if length != len(buf) - 16 or length > MANIFEST_BODY_MAX:
        raise _corrupt("body_length", "MANIFEST", declared=length, actual=len(buf) - 16)
    return manifest_from_body(decode_value(memoryview(buf)[12:-4], limits, "manifest"))


def encode_manifest(manifest: Manifest) -> bytes:
    body = value.encode(manifest.body())
    manifest_from_body(value.decode(body))  # never write what we would refuse to read
    return _seal(b"TAYM\x01\x00\x00\x00" + struct.pack(">I", len(body)) + body)


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


__all__ = [
    "Current", "Manifest", "BaseSegment", "Retention", "INFINITY", "Mutation", "Snapshot",
    "decode_store_v2", "encode_store_v2", "decode_adoption", "encode_adoption",
    "decode_current", "encode_current", "decode_manifest", "encode_manifest",
    "manifest_from_body", "decode_retention", "verify_selection", "decode_snapshot",
    "encode_snapshot", "validate_snapshot", "decode_mutation", "encode_mutation",
    "PayloadRefused",
]


# ---- JOB_SNAPSHOT_V2 (7,1) ---------------------------------------------------------------

SNAPSHOT_PAIR = (7, 1)
MUTATION_PAIR = (8, 1)
SNAPSHOT_KEYS = frozenset({
    "attempt", "attempted_at", "availability_order", "completed_at", "definition",
    "diagnostic", "eligible_at", "inserted_at", "next_attempt", "state", "terminal_at",
})
STATES = frozenset({"scheduled", "available", "executing", "retryable", "completed",
                    "cancelled", "discarded"})
_PREFIX = struct.Struct(">16sQQB")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One retained job in an epoch's base: logical revision, tokens and its 11-key body."""

    job_id: bytes
    revision: int
    cycle: int
    execution: int | None
    body: dict

    def __getattr__(self, key: str) -> Any:  # body fields read as attributes
        try:
            return object.__getattribute__(self, "body")[key]
        except KeyError:
            raise AttributeError(key) from None


def _truncated(what: str, size: int, need: int) -> PayloadRefused:
    return PayloadRefused("invalid_payload", "truncated", field=what, length=size, need=need)


def decode_snapshot(payload: bytes | memoryview,
                    limits: value.DecodeLimits | None = None) -> Snapshot:
    """Decode and fully validate a (7,1) payload (validity and credibility rules)."""
    view = memoryview(payload)
    if len(view) < _PREFIX.size:
        raise _truncated("snapshot", len(view), _PREFIX.size)
    job_id, revision, cycle, exec_present = _PREFIX.unpack_from(view)
    offset = _PREFIX.size
    execution = None
    if exec_present not in (0, 1):
        raise invalid("exec_present must be 0 or 1", "snapshot.exec_present")
    if exec_present:
        if len(view) < offset + 8:
            raise _truncated("snapshot", len(view), offset + 8)
        (execution,) = struct.unpack_from(">Q", view, offset)
        offset += 8
    body = decode_value(view[offset:], limits, "snapshot")
    snapshot = Snapshot(bytes(job_id), revision, cycle, execution, body)
    validate_snapshot(snapshot)
    return snapshot


def encode_snapshot(snapshot: Snapshot) -> bytes:
    validate_snapshot(snapshot)
    prefix = _PREFIX.pack(snapshot.job_id, snapshot.revision, snapshot.cycle,
                          0 if snapshot.execution is None else 1)
    token = b"" if snapshot.execution is None else struct.pack(">Q", snapshot.execution)
    return prefix + token + value.encode(snapshot.body)


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise invalid(rule, "snapshot")


def validate_snapshot(s: Snapshot) -> None:
    """§3.5 validity (domains, presence by state, terminal_at) and credibility rules."""
    check_exact_keys(s.body, SNAPSHOT_KEYS, "snapshot")
    b = s.body
    if s.job_id == bytes(16):
        raise invalid("the all-zero ID is invalid", "snapshot.job_id")
    _require(1 <= s.cycle <= s.revision, "cycle in 1..revision")
    _require(s.execution is None or 1 <= s.execution <= s.revision, "execution in 1..revision")
    definition = validate_definition(b["definition"], "snapshot.definition")
    max_attempts = definition["max_attempts"]
    check_unsigned(b["attempt"], "snapshot.attempt", 0, max_attempts)
    check_optional(b["next_attempt"], "snapshot.next_attempt",
                   lambda v, f: check_unsigned(v, f, 1, max_attempts))
    for key in ("attempted_at", "completed_at", "eligible_at", "terminal_at"):
        check_optional(b[key], f"snapshot.{key}", check_time)
    check_time(b["inserted_at"], "snapshot.inserted_at")
    check_optional(b["availability_order"], "snapshot.availability_order",
                   lambda v, f: check_unsigned(v, f, 1))
    if b["diagnostic"] is not None:
        ev.check_diagnostic(b["diagnostic"], "snapshot.diagnostic")
    state = b["state"]
    if type(state) is not str or state not in STATES:
        raise invalid("unknown state", "snapshot.state")
    _check_presence(s, state)
    _check_credibility(s, state)


def _check_presence(s: Snapshot, state: str) -> None:
    b = s.body
    present = {key: b[key] is not None for key in
               ("next_attempt", "eligible_at", "availability_order", "completed_at")}
    present["execution"] = s.execution is not None
    rules = {   # key -> required presence; keys not listed are free
        "scheduled": dict(next_attempt=True, eligible_at=True, availability_order=False,
                          execution=False, completed_at=False),
        "available": dict(next_attempt=True, eligible_at=True, availability_order=True),
        "retryable": dict(next_attempt=True, eligible_at=True, availability_order=False),
        "executing": dict(next_attempt=True, execution=True, eligible_at=False,
                          availability_order=False),
        "completed": dict(completed_at=True, next_attempt=False, eligible_at=False,
                          availability_order=False, execution=False),
    }.get(state, dict(next_attempt=False, eligible_at=False, availability_order=False,
                      execution=False, completed_at=False))
    for key, required in rules.items():
        _require(present[key] == required, f"{state} needs {key} {'set' if required else 'nil'}")
    if state == "completed":
        _require(b["terminal_at"] == b["completed_at"],
                 "completed needs terminal_at = completed_at")
    elif state in ("cancelled", "discarded"):
        _require(b["terminal_at"] is not None, f"{state} needs terminal_at")
    else:
        _require(b["terminal_at"] is None, f"{state} needs terminal_at nil")


def _check_credibility(s: Snapshot, state: str) -> None:
    b = s.body
    attempted = b["attempted_at"] is not None
    if state == "scheduled":
        _require(s.revision == s.cycle == 1 and b["attempt"] == 0 and b["next_attempt"] == 1
                 and not attempted and b["diagnostic"] is None, "scheduled is not credible")
    elif state == "executing":
        _require(b["attempt"] > 0 and attempted and s.execution == s.revision
                 and b["next_attempt"] == b["attempt"], "executing is not credible")
    elif state in ("retryable", "discarded"):
        _require(b["attempt"] > 0 and attempted and b["diagnostic"] is not None,
                 f"{state} is not credible")
    elif state == "completed":
        _require(b["attempt"] > 0 and attempted, "completed is not credible")
    elif state == "available":
        fresh = b["attempt"] == 0 and b["next_attempt"] == 1 and not attempted
        _require(fresh or (b["attempt"] > 0 and attempted), "available is not credible")


# ---- JOB_MUTATION_V2 (8,1) ---------------------------------------------------------------

INSERTED, AVAILABLE, STARTED, FINISHED, CANCELLED, RETRIED = 1, 2, 3, 4, 5, 6
MUTATION_BODY_KEYS: dict[int, frozenset[str]] = {
    INSERTED: frozenset({"availability_order", "definition", "eligible_at"}),
    AVAILABLE: frozenset({"availability_order", "due_at"}),
    STARTED: frozenset({"attempt", "cycle_token"}),
    FINISHED: frozenset({"diagnostic", "disposition", "execution_token", "next_attempt",
                         "next_due_at", "outcome"}),
    CANCELLED: frozenset({"execution_token"}),
    RETRIED: frozenset({"availability_order", "mode", "new_due_at"}),
}
_MUTATION_PREFIX = struct.Struct(">16sBQQQ")


@dataclass(frozen=True, slots=True)
class Mutation:
    """One tail change. ``event`` is the Event-v1 event it stands for (apply with S = new)."""

    job_id: bytes
    kind: int
    expected_revision: int
    new_revision: int
    at: int
    availability_order: int | None
    event: ev.Event


def decode_mutation(payload: bytes | memoryview,
                    limits: value.DecodeLimits | None = None) -> Mutation:
    view = memoryview(payload)
    if len(view) < _MUTATION_PREFIX.size:
        raise _truncated("mutation", len(view), _MUTATION_PREFIX.size)
    job_id, kind, expected, new, at = _MUTATION_PREFIX.unpack_from(view)
    body = decode_value(view[_MUTATION_PREFIX.size:], limits, "mutation")
    return mutation_from_parts(bytes(job_id), kind, expected, new, at, body)


def mutation_from_parts(job_id: bytes, kind: int, expected: int, new: int, at: int,
                        body: Any) -> Mutation:
    """The §3.5 local checks, then the full Event-v1 validation of the rebuilt event."""
    if kind not in MUTATION_BODY_KEYS:
        raise invalid("kind must be 1..6", "mutation.kind", mutation_kind=kind)
    if expected > U64_MAX - 1 or new != expected + 1:
        raise invalid("new_revision must be expected_revision + 1", "mutation.new_revision")
    if (expected == 0) != (kind == INSERTED):
        raise invalid("expected_revision is 0 exactly for inserts", "mutation.expected_revision")
    check_time(at, "mutation.at")
    check_exact_keys(body, MUTATION_BODY_KEYS[kind], "mutation")
    order = body.get("availability_order")
    if kind == INSERTED:
        eligible = body["eligible_at"]
        due_now = is_unsigned(eligible) and eligible <= at
        if due_now != (order is not None):
            raise invalid("order must be set exactly when eligible_at <= at",
                          "mutation.availability_order")
    if order is not None or kind in (AVAILABLE, RETRIED):
        check_unsigned(order, "mutation.availability_order")
    v1_map = {k: v for k, v in body.items() if k != "availability_order"}
    v1_map.update(job_id=job_id, expected_revision=expected, at=at)
    event = ev.make_event((kind, 1), v1_map)
    return Mutation(job_id, kind, expected, new, at, order, event)


def encode_mutation(mutation: Mutation) -> bytes:
    body = {k: v for k, v in mutation.event.payload.items()
            if k not in ("job_id", "expected_revision", "at")}
    if "availability_order" in MUTATION_BODY_KEYS[mutation.kind]:
        body["availability_order"] = mutation.availability_order
    mutation_from_parts(mutation.job_id, mutation.kind, mutation.expected_revision,
                        mutation.new_revision, mutation.at, body)
    prefix = _MUTATION_PREFIX.pack(mutation.job_id, mutation.kind, mutation.expected_revision,
                                   mutation.new_revision, mutation.at)
    return prefix + value.encode(body)
