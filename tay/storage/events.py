"""Durable events: the Event-v1 job lifecycle (1..6, schema 1), result_recorded (10,2), and a
registry other modules use to add their own (type, schema) pairs.

An event is a record type, a payload schema and one canonical Value map with an exact key
set (docs/storage-events.md). ``decode_event`` checks, in this order: the pair is known
(``unsupported_semantics``), the Value decodes within budget (``invalid_payload`` /
``resource_limit``), then the pair's payload-local rules (``invalid_payload``). Transition
rules that need the job's previous state live in ``tay.storage.transitions``.

Builders (``job_inserted`` ... ``result_recorded``) validate with the same rules, so the
engine can never produce an event that replay would refuse on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

from tay import _native
from tay._native import _pure_events as slots
from tay.storage import value
from tay.storage.definition import (
    CHECKED_LIMITS,
    LazyDefinition,
    PayloadRefused,
    check_attempt,
    check_exact_keys,
    check_job_id,
    check_json_value,
    check_optional,
    check_seq,
    check_time,
    check_unsigned,
    decode_value,
    invalid,
    is_unsigned,
    validate_definition,
)

__all__ = [
    "Event", "PayloadRefused", "decode_event", "decode_events", "encode_event", "make_event", "register_pair",
    "registered_pairs", "job_inserted", "job_available", "job_started", "job_finished",
    "job_cancelled", "job_retried", "result_recorded", "diagnostic",
]

Pair = tuple[int, int]
Validator = Callable[[dict], None]

JOB_INSERTED: Pair = (1, 1)
JOB_AVAILABLE: Pair = (2, 1)
JOB_STARTED: Pair = (3, 1)
JOB_FINISHED: Pair = (4, 1)
JOB_CANCELLED: Pair = (5, 1)
JOB_RETRIED: Pair = (6, 1)
RESULT_RECORDED: Pair = (10, 2)
UNDOCUMENTED_PAIRS: frozenset[Pair] = frozenset({(12, 2)})

# outcome codes, dispositions, retry modes and diagnostic codes (§6.1)
SUCCESS, WORKER_FAILURE, TIMEOUT, INTERRUPTED = 0, 1, 2, 3
COMPLETED, RETRYABLE, DISCARDED = 0, 1, 2
MODE_EXPEDITE, MODE_NEW_CYCLE = 0, 1
DIAG_ERROR_RETURN, DIAG_RAISE, DIAG_THROW, DIAG_WORKER_EXIT = 1, 2, 3, 4
DIAG_TIMEOUT, DIAG_BAD_RETURN, DIAG_INTERRUPTED = 5, 6, 7

# outcome -> (allowed diagnostic codes (None: diagnostic must be nil), allowed dispositions)
OUTCOME_RULES: dict[int, tuple[frozenset[int] | None, frozenset[int]]] = {
    SUCCESS: (None, frozenset({COMPLETED})),
    WORKER_FAILURE: (frozenset({1, 2, 3, 4, 6}), frozenset({RETRYABLE, DISCARDED})),
    TIMEOUT: (frozenset({5}), frozenset({RETRYABLE, DISCARDED})),
    INTERRUPTED: (frozenset({7}), frozenset({RETRYABLE})),
}


@dataclass(frozen=True, slots=True)
class Event:
    """One decoded or built event. ``payload`` is read-only; ``raw`` caches its bytes."""

    type: int
    schema: int
    name: str
    payload: Mapping[str, Any]
    raw: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def pair(self) -> Pair:
        return (self.type, self.schema)

    def __getitem__(self, key: str) -> Any:
        return self.payload[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.payload.get(key, default)

    # typed accessors for the fields every job event has
    @property
    def job_id(self) -> bytes | None:
        return self.payload.get("job_id")

    @property
    def at(self) -> int:
        return self.payload["at"]

    @property
    def expected_revision(self) -> int:
        return self.payload["expected_revision"]

    @property
    def is_job_event(self) -> bool:
        return self.pair in _JOB_PAIRS


@dataclass(frozen=True, slots=True)
class _PairSpec:
    name: str
    validate: Validator


_REGISTRY: dict[Pair, _PairSpec] = {}


def register_pair(pair: Pair, name: str, validator: Validator) -> None:
    """Make ``pair`` a supported event. ``validator(payload)`` raises ``PayloadRefused``.

    Registering a pair twice is a programming error (one owner per pair).
    """
    if pair in _REGISTRY:
        raise ValueError(f"event pair {pair} is already registered as {_REGISTRY[pair].name}")
    _REGISTRY[pair] = _PairSpec(name, validator)


def registered_pairs() -> dict[Pair, str]:
    return {pair: spec.name for pair, spec in sorted(_REGISTRY.items())}


def _spec_for(pair: Pair) -> _PairSpec:
    """The registered spec, or the ``unsupported_semantics`` refusal for the pair."""
    spec = _REGISTRY.get(pair)
    if spec is not None:
        return spec
    event_type, schema = pair
    if pair in UNDOCUMENTED_PAIRS:
        raise PayloadRefused(
            "unsupported_semantics", "undocumented_payload_layout",
            event_type=event_type, schema=schema,
        )
    known_type = any(registered_type == event_type for registered_type, _ in _REGISTRY)
    reason = "unsupported_payload_schema" if known_type else "unknown_event_type"
    raise PayloadRefused("unsupported_semantics", reason, event_type=event_type, schema=schema)


def decode_event(
    event_type: int, schema: int, payload: bytes | memoryview,
    limits: value.DecodeLimits | None = None,
) -> Event:
    """Decode and check one event payload (pair, Value, payload-local rules).

    Well-formed Event-v1 payloads take the native fast path; anything else (including
    every payload that will be refused) goes through ``decode_event_exact``.
    """
    if (event_type, schema) in _FAST_PAIRS:
        limits = limits if limits is not None else _DEFAULT_LIMITS
        row = _native.events_scan(payload, ((0, len(payload), event_type, schema),),
                                  limits.depth, limits.nodes, limits.binary)
        if row[0] == slots.EVENT_FAST:
            return _FAST_BUILDERS[event_type](event_type, schema, bytes(payload), row, 0)
    return decode_event_exact(event_type, schema, payload, limits)


def decode_events(
    buffer: Any, records: list[tuple[int, int, int, int]],
    limits: value.DecodeLimits | None = None,
) -> Iterator[Event]:
    """Decode ``(payload_offset, length, type, schema)`` slices of ``buffer`` in order.

    One native call checks the whole batch; records it cannot vouch for are decoded (and
    refused) by ``decode_event_exact`` when the iteration reaches them, so a caller that
    applies events as they come sees exactly the sequential behaviour.
    """
    limits = limits if limits is not None else _DEFAULT_LIMITS
    rows = _native.events_scan(buffer, records, limits.depth, limits.nodes, limits.binary)
    if not records:
        return
    # one copy of the batch's span, then cheap bytes slices (no memoryview per record)
    low = min(offset for offset, _, _, _ in records)
    high = max(offset + length for offset, length, _, _ in records)
    block = bytes(buffer[low:high])
    width, fast, builders = slots.EVENT_ROW, slots.EVENT_FAST, _FAST_BUILDERS
    base = 0
    for offset, length, event_type, schema in records:
        data = block[offset - low:offset - low + length]
        if rows[base] == fast:
            yield builders[event_type](event_type, schema, data, rows, base)
        else:
            yield decode_event_exact(event_type, schema, data, limits)
        base += width


def decode_event_exact(
    event_type: int, schema: int, payload: bytes | memoryview,
    limits: value.DecodeLimits | None = None,
) -> Event:
    """The reference decoder: Value decode, then the pair's validator (every refusal)."""
    pair = (event_type, schema)
    spec = _spec_for(pair)
    obj = decode_value(payload, limits, spec.name)
    spec.validate(obj)
    return Event(event_type, schema, spec.name, MappingProxyType(obj), bytes(payload))


def make_event(pair: Pair, payload: dict) -> Event:
    """Build an event of a registered pair, checked by the same validator as decoding."""
    spec = _spec_for(pair)
    payload = dict(payload)  # a LazyDefinition stays one: encode_map splices its bytes
    spec.validate(payload)
    return Event(pair[0], pair[1], spec.name, MappingProxyType(payload))


def encode_event(event: Event) -> bytes:
    """The canonical payload bytes of an event."""
    if event.raw is not None:
        return event.raw
    return value.encode_map(event.payload)


# ---- payload validators ----------------------------------------------------------------

def _common(payload: Any, keys: frozenset[str], name: str, *, insert: bool = False) -> dict:
    check_exact_keys(payload, keys, name)
    check_time(payload["at"], f"{name}.at")
    check_job_id(payload["job_id"], f"{name}.job_id")
    if insert:
        if not (is_unsigned(payload["expected_revision"]) and payload["expected_revision"] == 0):
            raise invalid("expected_revision must be 0 for an insert", f"{name}.expected_revision")
    else:
        check_seq(payload["expected_revision"], f"{name}.expected_revision")
    return payload


_COMMON_KEYS = frozenset({"at", "expected_revision", "job_id"})


def _keys(*names: str) -> frozenset[str]:
    return _COMMON_KEYS | frozenset(names)


def _validate_inserted(payload: Any) -> None:
    _common(payload, _keys("definition", "eligible_at"), "job_inserted", insert=True)
    definition = validate_definition(payload["definition"], "job_inserted.definition")
    check_time(payload["eligible_at"], "job_inserted.eligible_at")
    scheduled_at = definition["scheduled_at"]
    expected = payload["at"] if scheduled_at is None else scheduled_at
    if payload["eligible_at"] != expected:
        raise invalid("eligible_at must equal scheduled_at (or at when unscheduled)",
                      "job_inserted.eligible_at")


def _validate_available(payload: Any) -> None:
    _common(payload, _keys("due_at"), "job_available")
    check_time(payload["due_at"], "job_available.due_at")
    if payload["due_at"] > payload["at"]:
        raise invalid("due_at must not be after at", "job_available.due_at")


def _validate_started(payload: Any) -> None:
    _common(payload, _keys("attempt", "cycle_token"), "job_started")
    check_attempt(payload["attempt"], "job_started.attempt")
    check_seq(payload["cycle_token"], "job_started.cycle_token")


def check_diagnostic(obj: Any, field: str) -> int:
    """Diagnostic v1: exactly ``{"code": U, "version": 1}``; returns the code."""
    check_exact_keys(obj, frozenset({"code", "version"}), field)
    if not (is_unsigned(obj["version"]) and obj["version"] == 1):
        raise invalid("diagnostic version must be 1", f"{field}.version")
    return check_unsigned(obj["code"], f"{field}.code", 1, 7)


def _validate_finished(payload: Any) -> None:
    name = "job_finished"
    _common(payload, _keys("diagnostic", "disposition", "execution_token", "next_attempt",
                           "next_due_at", "outcome"), name)
    check_seq(payload["execution_token"], f"{name}.execution_token")
    outcome = check_unsigned(payload["outcome"], f"{name}.outcome", 0, 3)
    codes, dispositions = OUTCOME_RULES[outcome]
    if codes is None:
        if payload["diagnostic"] is not None:
            raise invalid("a successful outcome has no diagnostic", f"{name}.diagnostic")
    elif payload["diagnostic"] is None or check_diagnostic(
        payload["diagnostic"], f"{name}.diagnostic"
    ) not in codes:
        raise invalid(f"outcome {outcome} needs a diagnostic code in {sorted(codes)}",
                      f"{name}.diagnostic")
    disposition = check_unsigned(payload["disposition"], f"{name}.disposition", 0, 2)
    if disposition not in dispositions:
        raise invalid(f"outcome {outcome} allows dispositions {sorted(dispositions)}",
                      f"{name}.disposition")
    if disposition == RETRYABLE:
        check_attempt(payload["next_attempt"], f"{name}.next_attempt")
        check_time(payload["next_due_at"], f"{name}.next_due_at")
    else:
        for key in ("next_attempt", "next_due_at"):
            if payload[key] is not None:
                raise invalid("must be nil unless the disposition is retryable", f"{name}.{key}")


def _validate_cancelled(payload: Any) -> None:
    _common(payload, _keys("execution_token"), "job_cancelled")
    check_optional(payload["execution_token"], "job_cancelled.execution_token", check_seq)


def _validate_retried(payload: Any) -> None:
    _common(payload, _keys("mode", "new_due_at"), "job_retried")
    check_unsigned(payload["mode"], "job_retried.mode", 0, 1)
    check_time(payload["new_due_at"], "job_retried.new_due_at")
    if payload["new_due_at"] != payload["at"]:
        raise invalid("new_due_at must equal at", "job_retried.new_due_at")


def _validate_result_recorded(payload: Any) -> None:
    _common(payload, _keys("result"), "result_recorded")
    check_json_value(payload["result"], "result_recorded.result")


for _pair, _name, _validator in (
    (JOB_INSERTED, "job_inserted", _validate_inserted),
    (JOB_AVAILABLE, "job_available", _validate_available),
    (JOB_STARTED, "job_started", _validate_started),
    (JOB_FINISHED, "job_finished", _validate_finished),
    (JOB_CANCELLED, "job_cancelled", _validate_cancelled),
    (JOB_RETRIED, "job_retried", _validate_retried),
    (RESULT_RECORDED, "result_recorded", _validate_result_recorded),
):
    register_pair(_pair, _name, _validator)

_JOB_PAIRS = frozenset(
    {JOB_INSERTED, JOB_AVAILABLE, JOB_STARTED, JOB_FINISHED, JOB_CANCELLED, JOB_RETRIED,
     RESULT_RECORDED}
)


# ---- builders (the engine creates events only through these) ---------------------------

def diagnostic(code: int) -> dict[str, int]:
    return {"code": code, "version": 1}


def job_inserted(job_id: bytes, at: int, definition: Mapping[str, Any]) -> Event:
    scheduled_at = definition.get("scheduled_at")
    eligible_at = at if scheduled_at is None else scheduled_at
    if type(definition) is not LazyDefinition:
        definition = dict(definition)
    return make_event(JOB_INSERTED, {"at": at, "definition": definition,
                                     "eligible_at": eligible_at, "expected_revision": 0,
                                     "job_id": job_id})


def job_available(job_id: bytes, at: int, expected_revision: int, due_at: int) -> Event:
    return make_event(JOB_AVAILABLE, {"at": at, "due_at": due_at,
                                      "expected_revision": expected_revision, "job_id": job_id})


def job_started(job_id: bytes, at: int, expected_revision: int, attempt: int,
                cycle_token: int) -> Event:
    return make_event(JOB_STARTED, {"at": at, "attempt": attempt, "cycle_token": cycle_token,
                                    "expected_revision": expected_revision, "job_id": job_id})


def job_finished(job_id: bytes, at: int, expected_revision: int, *, execution_token: int,
                 outcome: int, diagnostic_code: int | None, disposition: int,
                 next_attempt: int | None = None, next_due_at: int | None = None) -> Event:
    return make_event(JOB_FINISHED, {
        "at": at,
        "diagnostic": None if diagnostic_code is None else diagnostic(diagnostic_code),
        "disposition": disposition, "execution_token": execution_token,
        "expected_revision": expected_revision, "job_id": job_id,
        "next_attempt": next_attempt, "next_due_at": next_due_at, "outcome": outcome,
    })


def job_cancelled(job_id: bytes, at: int, expected_revision: int,
                  execution_token: int | None) -> Event:
    return make_event(JOB_CANCELLED, {"at": at, "execution_token": execution_token,
                                      "expected_revision": expected_revision, "job_id": job_id})


def job_retried(job_id: bytes, at: int, expected_revision: int, mode: int) -> Event:
    return make_event(JOB_RETRIED, {"at": at, "expected_revision": expected_revision,
                                    "job_id": job_id, "mode": mode, "new_due_at": at})


def result_recorded(job_id: bytes, at: int, expected_revision: int, result: Any) -> Event:
    return make_event(RESULT_RECORDED, {"at": at, "expected_revision": expected_revision,
                                        "job_id": job_id, "result": result})


# ---- fast-path event builders (rows from tay._native.events_scan) -----------------------

_DEFAULT_LIMITS = value.DecodeLimits()
_FAST_PAIRS = frozenset(_JOB_PAIRS)


def _slot_setter(name: str) -> Callable[[Event, Any], None]:
    return Event.__dict__[name].__set__


def _make(event_type: int, schema: int, name: str, payload: Mapping[str, Any], raw: bytes,
          _new: Any = object.__new__, _type: Any = _slot_setter("type"),
          _schema: Any = _slot_setter("schema"), _name: Any = _slot_setter("name"),
          _payload: Any = _slot_setter("payload"), _raw: Any = _slot_setter("raw")) -> Event:
    """``Event(...)`` for the replay hot path: the same fields set through the slot
    descriptors, without the frozen dataclass ``__init__`` (a third of the cost)."""
    event = _new(Event)
    _type(event, event_type)
    _schema(event, schema)
    _name(event, name)
    _payload(event, payload)
    _raw(event, raw)
    return event


def _nil(row: list[int], base: int, slot: int) -> bool:
    return bool((row[base + slots.NIL] >> slot) & 1)


def _common_fields(data: bytes, row: list[int], base: int) -> dict[str, Any]:
    job_id = row[base + slots.JOB_ID]
    return {"at": row[base + slots.AT], "expected_revision": row[base + slots.EXPECTED],
            "job_id": data[job_id:job_id + 16]}


def _text(data: bytes, row: list[int], base: int, slot: int) -> str:
    start = row[base + slot]
    return data[start:start + row[base + slot + 1]].decode("utf-8")


def _fast_inserted(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    start = row[base + slots.DEFINITION]
    args = row[base + slots.ARGS] - start
    definition = LazyDefinition(
        data[start:start + row[base + slots.DEFINITION_LENGTH]],
        (args, args + row[base + slots.ARGS_LENGTH]), row[base + slots.ARGS_NODES],
        row[base + slots.MAX_ATTEMPTS],
        _text(data, row, base, slots.QUEUE),
        None if _nil(row, base, slots.SCHEDULED_AT) else row[base + slots.SCHEDULED_AT],
        row[base + slots.TIMEOUT_MS], _text(data, row, base, slots.WORKER))
    payload = _common_fields(data, row, base)
    payload["definition"] = definition
    payload["eligible_at"] = row[base + slots.A]
    return _make(event_type, schema, "job_inserted", MappingProxyType(payload), data)


def _fast_available(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    payload["due_at"] = row[base + slots.A]
    return _make(event_type, schema, "job_available", MappingProxyType(payload), data)


def _fast_started(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    payload["attempt"] = row[base + slots.A]
    payload["cycle_token"] = row[base + slots.B]
    return _make(event_type, schema, "job_started", MappingProxyType(payload), data)


def _fast_finished(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    payload["diagnostic"] = None if _nil(row, base, slots.D) else diagnostic(row[base + slots.D])
    payload["disposition"] = row[base + slots.B]
    payload["execution_token"] = row[base + slots.A]
    payload["next_attempt"] = None if _nil(row, base, slots.E) else row[base + slots.E]
    payload["next_due_at"] = None if _nil(row, base, slots.F) else row[base + slots.F]
    payload["outcome"] = row[base + slots.C]
    return _make(event_type, schema, "job_finished", MappingProxyType(payload), data)


def _fast_cancelled(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    payload["execution_token"] = None if _nil(row, base, slots.A) else row[base + slots.A]
    return _make(event_type, schema, "job_cancelled", MappingProxyType(payload), data)


def _fast_retried(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    payload["mode"] = row[base + slots.A]
    payload["new_due_at"] = row[base + slots.B]
    return _make(event_type, schema, "job_retried", MappingProxyType(payload), data)


def _fast_result(event_type: int, schema: int, data: bytes, row: list[int], base: int) -> Event:
    payload = _common_fields(data, row, base)
    start = row[base + slots.A]
    # already checked canonical and within budget as part of the whole payload
    payload["result"] = value.decode(memoryview(data)[start:start + row[base + slots.B]],
                                     CHECKED_LIMITS)
    return _make(event_type, schema, "result_recorded", MappingProxyType(payload), data)


_FAST_BUILDERS: dict[int, Callable[[int, int, bytes, list[int], int], Event]] = {
    1: _fast_inserted, 2: _fast_available, 3: _fast_started, 4: _fast_finished,
    5: _fast_cancelled, 6: _fast_retried, 10: _fast_result,
}
