"""Store-v2 record payloads (storage.md §3.5): JOB_SNAPSHOT_V2 (7,1) with its validity and
credibility rules, and JOB_MUTATION_V2 (8,1).

A mutation is checked locally and then rebuilt as the Event-v1 event it stands for, so the
one transition function (``tay.storage.events.transitions.apply`` with S = new_revision) replays it.
"""

from __future__ import annotations

import struct
from typing import Any

from tay._frozen import Fields, Frozen, set_field
from tay.storage import events as ev
from tay.storage.formats import value
from tay.storage.events.definition import (
    PayloadRefused, U64_MAX, check_exact_keys, check_time, check_unsigned,
    decode_value, invalid, is_unsigned, lazy_definition, lazy_definition_in,
    validate_definition,
)


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
_TOKEN = struct.Struct(">Q")  # the execution token, present when exec_present is 1


class Snapshot(Frozen):
    """One retained job in an epoch's base: logical revision, tokens and its 11-key body.

    ``definition_bytes`` (the definition's canonical bytes as read; None: encode it when
    needed) takes no part in equality, hashing or the repr, as in the dataclass this was."""

    __slots__ = ("job_id", "revision", "cycle", "execution", "body", "definition_bytes")
    job_id: bytes
    revision: int
    cycle: int
    execution: int | None
    body: dict
    definition_bytes: bytes | None

    def __init__(self, job_id: bytes, revision: int, cycle: int, execution: int | None,
                 body: dict, definition_bytes: bytes | None = None) -> None:
        set_field(self, "job_id", job_id)
        set_field(self, "revision", revision)
        set_field(self, "cycle", cycle)
        set_field(self, "execution", execution)
        set_field(self, "body", body)
        set_field(self, "definition_bytes", definition_bytes)

    def _values(self) -> tuple:
        return (self.job_id, self.revision, self.cycle, self.execution, self.body)

    def __repr__(self) -> str:
        return (f"Snapshot(job_id={self.job_id!r}, revision={self.revision!r}, "
                f"cycle={self.cycle!r}, execution={self.execution!r}, body={self.body!r})")

    def __getattr__(self, key: str) -> Any:  # body fields read as attributes
        try:
            return object.__getattribute__(self, "body")[key]
        except KeyError:
            raise AttributeError(key) from None


def _unpack(layout: struct.Struct, view: memoryview, offset: int, what: str) -> tuple:
    """``layout`` read at ``offset``; a payload too short for it is ``truncated``."""
    if len(view) < offset + layout.size:
        raise PayloadRefused("invalid_payload", "truncated", field=what, length=len(view),
                             need=offset + layout.size)
    return layout.unpack_from(view, offset)



def decode_snapshot(payload: bytes | memoryview,
                    limits: value.DecodeLimits | None = None) -> Snapshot:
    """Decode and fully validate a (7,1) payload (validity and credibility rules)."""
    view = memoryview(payload)
    job_id, revision, cycle, exec_present = _unpack(_PREFIX, view, 0, "snapshot")
    offset = _PREFIX.size
    execution = None
    if exec_present not in (0, 1):
        raise invalid("exec_present must be 0 or 1", "snapshot.exec_present")
    if exec_present:
        (execution,) = _unpack(_TOKEN, view, offset, "snapshot")
        offset += _TOKEN.size
    body = decode_value(view[offset:], limits, "snapshot")
    snapshot = Snapshot(bytes(job_id), revision, cycle, execution, body,
                        _definition_span(view[offset:], body))
    validate_snapshot(snapshot)
    if snapshot.definition_bytes is not None:  # keep the stored bytes, not args objects
        body["definition"] = lazy_definition(snapshot.definition_bytes, body["definition"])
    return snapshot


# keys of the body before and after "definition" (canonical order: UTF-8 bytes), encoded
_BEFORE_DEFINITION = tuple((key, value.encode(key)) for key in (
    "attempt", "attempted_at", "availability_order", "completed_at"))
_AFTER_DEFINITION = tuple((key, value.encode(key)) for key in (
    "diagnostic", "eligible_at", "inserted_at", "next_attempt", "state", "terminal_at"))
_DEFINITION_KEY = value.encode("definition")


def _scalar_size(item: Any) -> int:
    """Encoded size of a body field other than the definition (-1: not a body scalar)."""
    kind = type(item)
    if item is None:
        return 1
    if kind is int:
        return 9 if 0 <= item <= 0xFFFFFFFFFFFFFFFF else -1
    if kind is str:
        return 5 + len(item.encode("utf-8"))
    if kind is dict and item.keys() == {"code", "version"}:  # a diagnostic
        return len(value.encode(item))
    return -1


def _definition_span(body_bytes: memoryview, body: Any) -> bytes | None:
    """The definition's canonical bytes cut out of a decoded body (a canonical map), so a
    replayed job need not encode it again: the fields around it are small, and their
    canonical sizes give where it starts and ends (checked against the key bytes on both
    sides). None when the body is not the 11-key map (validation refuses it next) or the
    cut does not check out."""
    if type(body) is not dict or len(body) != 11:
        return None
    start = 5
    for sizes in (_BEFORE_DEFINITION, _AFTER_DEFINITION):
        total = 0
        for key, encoded in sizes:
            size = _scalar_size(body.get(key, ...))
            if size < 0:
                return None
            total += len(encoded) + size
        if sizes is _BEFORE_DEFINITION:
            start += total + len(_DEFINITION_KEY)
        else:
            end = len(body_bytes) - total
    after = _AFTER_DEFINITION[0][1]
    if (end <= start or body_bytes[start - len(_DEFINITION_KEY):start] != _DEFINITION_KEY
            or body_bytes[end:end + len(after)] != after):
        return None
    return bytes(body_bytes[start:end])


def encode_snapshot(snapshot: Snapshot) -> bytes:
    validate_snapshot(snapshot)
    prefix = _PREFIX.pack(snapshot.job_id, snapshot.revision, snapshot.cycle,
                          0 if snapshot.execution is None else 1)
    token = b"" if snapshot.execution is None else _TOKEN.pack(snapshot.execution)
    body = snapshot.body
    if snapshot.definition_bytes is not None:  # the job's canonical bytes, spliced
        body = {**body, "definition": value.Precoded(snapshot.definition_bytes)}
    return prefix + token + value.encode_map(body)  # a lazy definition is spliced too


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise invalid(rule, "snapshot")


_TIME_FIELDS = tuple((key, f"snapshot.{key}")
                     for key in ("attempted_at", "completed_at", "eligible_at", "terminal_at"))


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
    if b["next_attempt"] is not None:
        check_unsigned(b["next_attempt"], "snapshot.next_attempt", 1, max_attempts)
    for key, field in _TIME_FIELDS:
        if b[key] is not None:
            check_time(b[key], field)
    check_time(b["inserted_at"], "snapshot.inserted_at")
    if b["availability_order"] is not None:
        check_unsigned(b["availability_order"], "snapshot.availability_order", 1)
    if b["diagnostic"] is not None:
        ev.check_diagnostic(b["diagnostic"], "snapshot.diagnostic")
    state = b["state"]
    if type(state) is not str or state not in STATES:
        raise invalid("unknown state", "snapshot.state")
    _check_presence(s, state)
    _check_credibility(s, state)


# state -> (field, whether it must be set), checked in this order; fields not listed are
# free in that state
_PRESENCE: dict[str, tuple[tuple[str, bool], ...]] = {
    "scheduled": (("next_attempt", True), ("eligible_at", True), ("availability_order", False),
                  ("execution", False), ("completed_at", False)),
    "available": (("next_attempt", True), ("eligible_at", True), ("availability_order", True)),
    "retryable": (("next_attempt", True), ("eligible_at", True), ("availability_order", False)),
    "executing": (("next_attempt", True), ("execution", True), ("eligible_at", False),
                  ("availability_order", False)),
    "completed": (("completed_at", True), ("next_attempt", False), ("eligible_at", False),
                  ("availability_order", False), ("execution", False)),
}
_PRESENCE_ELSE = (("next_attempt", False), ("eligible_at", False), ("availability_order", False),
                  ("execution", False), ("completed_at", False))


def _check_presence(s: Snapshot, state: str) -> None:
    b = s.body
    for key, required in _PRESENCE.get(state, _PRESENCE_ELSE):
        present = (s.execution if key == "execution" else b[key]) is not None
        if present != required:
            raise invalid(f"{state} needs {key} {'set' if required else 'nil'}", "snapshot")
    if state == "completed":
        _require(b["terminal_at"] == b["completed_at"],
                 "completed needs terminal_at = completed_at")
    elif state in ("cancelled", "discarded"):
        if b["terminal_at"] is None:
            raise invalid(f"{state} needs terminal_at", "snapshot")
    elif b["terminal_at"] is not None:
        raise invalid(f"{state} needs terminal_at nil", "snapshot")


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
        if not (b["attempt"] > 0 and attempted and b["diagnostic"] is not None):
            raise invalid(f"{state} is not credible", "snapshot")
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


class Mutation(Fields):
    """One tail change. ``event`` is the Event-v1 event it stands for (apply with S = new).

    Immutable; a named tuple because the live writer and replay build one per change."""

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
    job_id, kind, expected, new, at = _unpack(_MUTATION_PREFIX, view, 0, "mutation")
    encoded_body = view[_MUTATION_PREFIX.size:]
    body = decode_value(encoded_body, limits, "mutation")
    if kind == INSERTED and type(body) is dict and type(body.get("definition")) is dict:
        try:
            validate_definition(body["definition"])
        except PayloadRefused:
            pass  # mutation_from_parts refuses it, naming the field as it always has
        else:  # keep the stored bytes: no second encoding, args not held
            body["definition"] = lazy_definition_in(encoded_body, body)
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
    return prefix + value.encode_map(body)  # a live definition splices its stored bytes
