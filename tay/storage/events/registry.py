"""The Event type and the registry of supported (record type, schema) pairs.

Every event pair has exactly one owner module that registers its validator here
(``tay.storage.events.v1`` for the job lifecycle, ``tay.storage.events.schedules`` for
schedules). Decoding an unknown pair is refused as ``unsupported_semantics``; building or
decoding a known one runs the same validator, so the engine cannot build what replay refuses.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from types import MappingProxyType
from collections.abc import Callable
from typing import Any, Mapping, Sequence

from tay._frozen import Frozen, set_field

from tay.storage.formats import value
from tay.storage.events.definition import PayloadRefused, decode_value

Pair = tuple[int, int]
Validator = Callable[[dict], None]

JOB_INSERTED: Pair = (1, 1)
JOB_AVAILABLE: Pair = (2, 1)
JOB_STARTED: Pair = (3, 1)
JOB_FINISHED: Pair = (4, 1)
JOB_CANCELLED: Pair = (5, 1)
JOB_RETRIED: Pair = (6, 1)
RESULT_RECORDED: Pair = (10, 2)
# operations (docs/storage-events.md): queue control and job events of the admin API
QUEUE_PAUSED: Pair = (20, 2)
QUEUE_RESUMED: Pair = (21, 2)
FAILURE_RECORDED: Pair = (22, 2)
JOB_REQUEUED: Pair = (23, 2)
QUEUE_SCALED: Pair = (24, 2)
SCHEDULE_PAUSED: Pair = (25, 2)
SCHEDULE_RESUMED: Pair = (26, 2)
JOB_EXPEDITED: Pair = (27, 2)
QUEUE_RATE_LIMITED: Pair = (28, 2)
JOB_DELETED: Pair = (29, 2)
# the engine's own record of what each UTC day saw (docs/storage-events.md)
DAY_TOTALS: Pair = (32, 2)
UNDOCUMENTED_PAIRS: frozenset[Pair] = frozenset({(12, 2)})
LIFECYCLE_PAIRS: frozenset[Pair] = frozenset(
    {JOB_INSERTED, JOB_AVAILABLE, JOB_STARTED, JOB_FINISHED, JOB_CANCELLED, JOB_RETRIED}
)
JOB_PAIRS: frozenset[Pair] = frozenset(
    {JOB_INSERTED, JOB_AVAILABLE, JOB_STARTED, JOB_FINISHED, JOB_CANCELLED, JOB_RETRIED,
     RESULT_RECORDED}
)
# every pair that names one job and goes through the transition function (JOB_PAIRS are
# the ones the native fast path decodes)
ALL_JOB_PAIRS: frozenset[Pair] = JOB_PAIRS | {FAILURE_RECORDED, JOB_REQUEUED,
                                                    JOB_EXPEDITED, JOB_DELETED}

class Event:
    """One decoded or built event. ``payload`` is read-only; ``raw`` caches its bytes.

    What ``@dataclass(frozen=True, slots=True)`` with ``raw`` out of the comparison and the
    repr would make, written out: the decorator execs its generated methods and builds
    the class twice at import (~0.9 ms of every ``tay serve`` start). Not a
    ``tay._frozen.Frozen``: ``event_with_raw`` switches a filled ``EventFilling`` to this
    class, which CPython allows only between classes of the same base, and an
    ``EventFilling`` under ``Frozen`` stores through a Python-level ``__setattr__``
    (measured 245 -> 868 ns an event).
    """

    __slots__ = ("type", "schema", "name", "payload", "raw")
    __match_args__ = ("type", "schema", "name", "payload", "raw")
    type: int
    schema: int
    name: str
    payload: Mapping[str, Any]
    raw: bytes | None

    def __init__(self, type: int, schema: int, name: str,  # noqa: A002 (the field's name)
                 payload: Mapping[str, Any], raw: bytes | None = None) -> None:
        set_field(self, "type", type)
        set_field(self, "schema", schema)
        set_field(self, "name", name)
        set_field(self, "payload", payload)
        set_field(self, "raw", raw)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:  # raw is a cache: not compared
        if other.__class__ is self.__class__:
            mine = (self.type, self.schema, self.name, self.payload)
            return mine == (other.type, other.schema, other.name,  # type: ignore[attr-defined]
                            other.payload)  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.type, self.schema, self.name, self.payload))

    def __repr__(self) -> str:
        return (f"{type(self).__qualname__}(type={self.type!r}, schema={self.schema!r}, "
                f"name={self.name!r}, payload={self.payload!r})")

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
        return self.pair in ALL_JOB_PAIRS


class _PairSpec(Frozen):
    __slots__ = ("name", "validate")
    name: str
    validate: Validator

    def __init__(self, name: str, validate: Validator) -> None:
        set_field(self, "name", name)
        set_field(self, "validate", validate)


_REGISTRY: dict[Pair, _PairSpec] = {}


def register_pair(pair: Pair, name: str, validator: Validator) -> None:
    """Make ``pair`` a supported event. ``validator(payload)`` raises ``PayloadRefused``.

    Registering a pair twice is a programming error (one owner per pair).
    """
    if pair in _REGISTRY:
        raise ValueError(f"event pair {pair} is already registered as {_REGISTRY[pair].name}")
    _REGISTRY[pair] = _PairSpec(name, validator)


def register_pairs(table: tuple[tuple[Pair, str, Validator], ...]) -> None:
    """``register_pair`` for each (pair, name, validator) row of an owner module's table."""
    for pair, name, validator in table:
        register_pair(pair, name, validator)


# ---- pairs carried inside a Store-v2 epoch (docs/storage-format.md, "Epoch events") -----

Entity = Callable[[Mapping[str, Any]], tuple]


def job_entity(payload: Mapping[str, Any]) -> tuple:
    """The entity of a job-scoped pair: ``("job", job_id)``."""
    return ("job", payload["job_id"])


class EpochCarry(Frozen):
    """How a registered non-lifecycle pair lives in a Store-v2 epoch.

    ``entity(payload)`` names what the event changes (``("job", id)`` for job-scoped pairs,
    e.g. ``("schedule", id)`` otherwise): the logical revision chain it belongs to.
    ``attachment``: a job-scoped pair whose state a base carries as a (31,2) attachment.
    """

    __slots__ = ("entity", "attachment")
    entity: Entity
    attachment: bool

    def __init__(self, entity: Entity, attachment: bool = False) -> None:
        set_field(self, "entity", entity)
        set_field(self, "attachment", attachment)

    @property
    def job_scoped(self) -> bool:
        return self.entity is job_entity


_EPOCH: dict[Pair, EpochCarry] = {}


def carry_in_epochs(pair: Pair, entity: Entity, *, attachment: bool = False) -> None:
    """Let a registered pair travel inside Store-v2 epochs, wrapped in (30,2) / (31,2).

    Only the pair's owner calls this, once, next to its ``register_pair``. Lifecycle pairs
    (1..6,1) never do: inside an epoch they are (8,1) mutations.
    """
    if pair not in _REGISTRY:
        raise ValueError(f"event pair {pair} is not registered")
    if pair in _EPOCH or pair in LIFECYCLE_PAIRS:
        raise ValueError(f"event pair {pair} cannot be carried in epochs twice or at all")
    if attachment and entity is not job_entity:
        raise ValueError("only job-scoped pairs can be job attachments")
    _EPOCH[pair] = EpochCarry(entity, attachment)


def epoch_carry(pair: Pair) -> EpochCarry | None:
    """How ``pair`` is carried in epochs, or None when it cannot appear inside one."""
    return _EPOCH.get(pair)


def registered_pairs() -> dict[Pair, str]:
    return {pair: spec.name for pair, spec in sorted(_REGISTRY.items())}


def spec_for(pair: Pair) -> _PairSpec:
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

def decode_event_exact(
    event_type: int, schema: int, payload: bytes | memoryview,
    limits: value.DecodeLimits | None = None,
) -> Event:
    """The reference decoder: Value decode, then the pair's validator (every refusal)."""
    pair = (event_type, schema)
    spec = spec_for(pair)
    obj = decode_value(payload, limits, spec.name)
    spec.validate(obj)
    return Event(event_type, schema, spec.name, MappingProxyType(obj), bytes(payload))


class EventFilling:
    """``Event``'s slot layout without its frozen ``__setattr__``: ``event_with_raw`` (and
    the engine's fused commits, which inline it) fill one of these with plain attribute
    stores, then make it an ``Event`` by setting its ``__class__``. The layouts are
    the same slots in the same order, which is what lets CPython switch the class (a
    layout that ever differs makes the switch raise, it cannot go wrong silently)."""

    __slots__ = Event.__slots__


def event_with_raw(event_type: int, schema: int, name: str, payload: Mapping[str, Any],
                   raw: bytes | None, _filling: Any = EventFilling,
                   _event: Any = Event) -> Event:
    """``Event(...)`` for hot paths (replay, the live writer): the same fields, without
    the frozen ``__init__`` (a guarded ``setattr`` per field: ~3x the cost).
    ``EventFilling()`` rather than ``object.__new__(EventFilling)``: the type's own call,
    without the ``__new__`` wrapper's argument tuple and checks (~250 instructions less)."""
    event = _filling()
    event.type = event_type
    event.schema = schema
    event.name = name
    event.payload = payload
    event.raw = raw
    event.__class__ = _event
    return event


def make_event(pair: Pair, payload: dict) -> Event:
    """Build an event of a registered pair, checked by the same validator as decoding."""
    spec = spec_for(pair)
    payload = dict(payload)  # a LazyDefinition stays one: encode_map splices its bytes
    spec.validate(payload)
    return event_with_raw(pair[0], pair[1], spec.name, MappingProxyType(payload), None)


def encode_event(event: Event) -> bytes:
    """The canonical payload bytes of an event."""
    if event.raw is not None:
        return event.raw
    return value.encode_map(event.payload)




def journal_records(sequenced: Sequence[tuple[int, Event]]) -> list[tuple[int, int, int, bytes]]:
    """(sequence, type, schema, payload) journal records for sequenced events.

    An event the engine already charged to the history budget carries its bytes in ``raw``,
    so nothing is encoded twice on the way to the journal.
    """
    return [(sequence, event.type, event.schema,
             event.raw if event.raw is not None else encode_event(event))
            for sequence, event in sequenced]
