"""The immutable job definition (storage.md §6.2) and the payload refusal type.

A definition is one canonical Value map with exactly eight keys. It is written once, inside
the ``job_inserted`` event, and never changes; two submissions with the same job ID are the
same job only when their canonical definition *bytes* are equal.

``PayloadRefused`` (a ``RecoveryRefused``, the storage layer's one error type; see
``tay.storage.formats.value``) is what every payload validator raises (events, definitions,
Store-v2 bodies). Its ``kind`` is the recovery class:
``unsupported_semantics``, ``invalid_payload`` or ``resource_limit``; ``field`` names the
offending key path (for example ``definition.retry_policy``).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from tay.failures import RecoveryRefused, StorageFailure
from tay.storage.formats import value

U64_MAX = 2**64 - 1
TIME_MAX = 2**63 - 1
ATTEMPT_MAX = 65_535
TIMEOUT_MAX_MS = 86_400_000
KEY_MAX_BYTES = 255

RETRY_POLICY_V1: dict[str, int] = {
    "base_ms": 1000, "cap_ms": 60_000, "jitter_divisor": 4, "version": 1,
}
DEFINITION_KEYS = frozenset(
    {"args", "definition_version", "max_attempts", "queue_key", "retry_policy",
     "scheduled_at", "timeout_ms", "worker_key"}
)
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_TIMEOUT_MS = 30_000


class PayloadRefused(RecoveryRefused):
    """A Value payload was refused; ``kind`` is the recovery class, ``field`` the key path."""

    def __init__(self, kind: str, reason: str, *, field: str | None = None, **extra: Any) -> None:
        if field is not None:
            extra["field"] = field
        super().__init__(kind, reason, **extra)
        self.field = field
        if field is not None:
            self.message = f"{self.message} [field {field}]"
            self.args = (self.message,)


def invalid(reason: str, field: str | None = None, **extra: Any) -> PayloadRefused:
    """Shorthand for an ``invalid_payload`` refusal."""
    return PayloadRefused("invalid_payload", reason, field=field, **extra)


# ---- domain checks shared by every payload schema -------------------------------------

def is_unsigned(obj: Any) -> bool:
    """A tag-04 integer: a Python int (not bool) in 0..2^64-1."""
    return type(obj) is int and 0 <= obj <= U64_MAX


def check_unsigned(obj: Any, field: str, low: int = 0, high: int = U64_MAX) -> int:
    if not is_unsigned(obj) or not low <= obj <= high:
        raise invalid(f"expected an unsigned integer in {low}..{high}, got {obj!r}", field)
    return obj


def check_time(obj: Any, field: str) -> int:
    return check_unsigned(obj, field, 0, TIME_MAX)


def check_seq(obj: Any, field: str) -> int:
    return check_unsigned(obj, field, 1, U64_MAX)


def check_attempt(obj: Any, field: str) -> int:
    return check_unsigned(obj, field, 1, ATTEMPT_MAX)


def check_optional(obj: Any, field: str, check) -> Any:
    return None if obj is None else check(obj, field)


_ZERO_ID = bytes(16)


def is_job_id(obj: Any) -> bool:
    """What ``check_job_id`` accepts, without naming a field (a caller that checks many
    names only the one refused)."""
    return type(obj) is bytes and len(obj) == 16 and obj != _ZERO_ID


def check_job_id(obj: Any, field: str = "job_id") -> bytes:
    if type(obj) is not bytes or len(obj) != 16:
        raise invalid("expected 16 bytes (tag 07)", field)
    if obj == _ZERO_ID:
        raise invalid("the all-zero ID is invalid", field)
    return obj


def check_key(obj: Any, field: str) -> str:
    """A ``Key``: text of 1..255 UTF-8 bytes without U+0000."""
    if type(obj) is not str:
        raise invalid("expected text", field)
    size = len(obj.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= KEY_MAX_BYTES:
        raise invalid(f"key must be 1..{KEY_MAX_BYTES} bytes, got {size}", field)
    if "\x00" in obj:
        raise invalid("key contains U+0000", field)
    return obj


def check_exact_keys(obj: Any, expected: frozenset[str] | set[str], field: str) -> dict:
    """A map whose key set is exactly ``expected`` (every key required, none extra)."""
    if type(obj) is not dict:
        raise invalid("expected a map", field)
    keys = set(obj)
    if keys != expected:
        missing = sorted(expected - keys)
        extra = sorted(keys - expected)
        raise invalid("key_set", field, missing=missing, unexpected=extra)
    return obj


def check_json_value(obj: Any, field: str) -> None:
    """An args-like value: nil/bool/int/float/text/list/map with text keys; never bytes."""
    stack = [(obj, field)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if item is None or kind in (bool, int, float, str):
            continue
        if kind is list:
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise invalid("map key is not text", where)
                stack.append((child, f"{where}.{key}"))
        else:
            raise invalid(f"{kind.__name__} is not allowed in a JSON-like value", where)


def decode_value(payload: bytes | memoryview, limits: value.DecodeLimits | None, field: str) -> Any:
    """Decode one canonical Value, re-raising the codec's refusal as a ``PayloadRefused``."""
    try:
        return value.decode(payload, limits if limits is not None else value.DecodeLimits())
    except StorageFailure as failure:
        if isinstance(failure, PayloadRefused):
            raise
        kind = "resource_limit" if failure.kind == "resource_limit" else "invalid_payload"
        raise PayloadRefused(kind, failure.reason, field=field, offset=failure.offset,
                             **failure.extra) from None


# ---- the definition ------------------------------------------------------------------

def validate_definition(obj: Any, field: str = "definition") -> dict:
    """Check a decoded definition map against §6.2; returns it unchanged."""
    if type(obj) is LazyDefinition:
        return obj  # built only from bytes the fast path checked against these same rules
    check_exact_keys(obj, DEFINITION_KEYS, field)
    args = obj["args"]
    if type(args) is not dict:
        raise invalid("args must be a map", f"{field}.args")
    check_json_value(args, f"{field}.args")
    if not (is_unsigned(obj["definition_version"]) and obj["definition_version"] == 1):
        raise invalid("definition_version must be 1", f"{field}.definition_version")
    check_unsigned(obj["max_attempts"], f"{field}.max_attempts", 1, ATTEMPT_MAX)
    check_key(obj["queue_key"], f"{field}.queue_key")
    check_key(obj["worker_key"], f"{field}.worker_key")
    policy = obj["retry_policy"]
    if type(policy) is not dict or policy != RETRY_POLICY_V1 or not all(
        is_unsigned(number) for number in policy.values()
    ):
        raise invalid("retry_policy must be exactly the v1 policy", f"{field}.retry_policy")
    check_optional(obj["scheduled_at"], f"{field}.scheduled_at", check_time)
    check_unsigned(obj["timeout_ms"], f"{field}.timeout_ms", 1, TIMEOUT_MAX_MS)
    return obj


def build_definition(
    *,
    worker_key: str,
    queue_key: str,
    args: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    scheduled_at: int | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict:
    """A validated definition map with the builder defaults (10 attempts, 30 s timeout)."""
    definition = {
        "args": dict(args) if args is not None else {},
        "definition_version": 1,
        "max_attempts": max_attempts,
        "queue_key": queue_key,
        "retry_policy": dict(RETRY_POLICY_V1),
        "scheduled_at": scheduled_at,
        "timeout_ms": timeout_ms,
        "worker_key": worker_key,
    }
    return validate_definition(definition)


def canonical_bytes(definition: Mapping[str, Any]) -> bytes:
    """The canonical Value encoding of a definition: what same-ID equality compares."""
    if type(definition) is LazyDefinition:
        return definition.canonical
    return value.encode(dict(definition))


_NOT_DECODED = object()
_new_object = object.__new__
# Budgets for re-decoding part of a Value that was already accepted as a whole: the part
# is within the whole's budgets, so the ceilings only stop nothing.
CHECKED_LIMITS = value.DecodeLimits(depth=256, nodes=0xFFFFFFFF, binary=0xFFFFFFFF)


class LazyDefinition(Mapping[str, Any]):
    """A validated definition kept as its canonical bytes plus its scalar fields.

    Replay builds these from the native fast path and the engine from a live insert
    (``from_live``): ``args`` (the only part that can be large) is decoded on access and
    not kept (``definition["args"]``, ``read_args``; the ``args`` property caches), so a
    job costs its bytes and a few scalars. ``value.encode_map`` splices ``canonical``
    as is, so an insert event never encodes its definition a second time. Reads like the plain dict
    ``validate_definition`` returns (same keys, same values, equal to it).
    ``args_nodes`` (every value and map key inside args, counted by the fast path) lets the
    engine charge its state budget without decoding args. ``scalars``: max_attempts,
    queue_key, scheduled_at, timeout_ms, worker_key and the args' end, at the positions
    named below (``QUEUE_KEY`` ...), for the engine's per-job path to read without a call.
    """

    __slots__ = ("canonical", "args_nodes", "_args", "scalars")

    def __init__(self, canonical: bytes, args_span: tuple[int, int], args_nodes: int,
                 max_attempts: int, queue_key: str, scheduled_at: int | None, timeout_ms: int,
                 worker_key: str) -> None:
        self.canonical = canonical
        self.args_nodes = args_nodes
        # args always start right after the map's header and the "args" key (the first
        # key in canonical order): only their end is kept, with the scalars
        if args_span[0] != _ARGS_START:
            raise ValueError(f"args start at {args_span[0]}, not {_ARGS_START}")
        self._args: Any = _NOT_DECODED
        self.scalars = _shared_scalars(
            (max_attempts, queue_key, scheduled_at, timeout_ms, worker_key, args_span[1]))

    @classmethod
    def from_live(cls, definition: Mapping[str, Any], canonical: bytes, args_bytes: int,
                  args_nodes: int) -> "LazyDefinition":
        """Keep a live, already validated definition as its canonical bytes only.

        ``canonical`` must be ``value.encode(definition)`` and ``args_bytes`` the encoded
        size of its args (the engine's measure gives both without a second encoding); the
        args dict itself is dropped, which halves what a live job holds.
        """
        start = _ARGS_START
        end = start + args_bytes
        if canonical[:start] != _ARGS_PREFIX or end > len(canonical):
            raise ValueError("canonical does not start with the args of a definition map")
        return cls(canonical, (start, end), args_nodes, definition["max_attempts"],
                   definition["queue_key"], definition["scheduled_at"],
                   definition["timeout_ms"], definition["worker_key"])

    @classmethod
    def from_args_json(cls, args_json: bytes, args_nodes: int, *, worker_key: str,
                       queue_key: str, max_attempts: int, scheduled_at: int | None,
                       timeout_ms: int) -> "LazyDefinition":
        """A live definition whose args arrive as JSON text (an object).

        The args are transcoded to canonical bytes in one native call and the definition is
        written around them, so no Python object is encoded. The scalars are checked as
        ``validate_definition`` checks them; ``args_nodes`` is the caller's count of every
        value and key inside args (the state budget charge).
        """
        return cls.from_args_value(value.encode_json(args_json), args_nodes,
                                   worker_key=worker_key, queue_key=queue_key,
                                   max_attempts=max_attempts, scheduled_at=scheduled_at,
                                   timeout_ms=timeout_ms)

    @classmethod
    def from_args_value(cls, args_value: bytes, args_nodes: int, *, worker_key: str,
                        queue_key: str, max_attempts: int, scheduled_at: int | None,
                        timeout_ms: int) -> "LazyDefinition":
        """``from_args_json`` of args already transcoded to their canonical bytes."""
        return live_definition(args_value, args_nodes, worker_key, queue_key, max_attempts,
                               scheduled_at, timeout_ms)

    @classmethod
    def restored(cls, canonical: bytes, args_nodes: int, scalars: tuple) -> "LazyDefinition":
        """The definition whose ``canonical``, ``args_nodes`` and ``scalars`` these are (as
        another one held them), its args not decoded yet: no validation, no decode."""
        definition = cls.__new__(cls)
        definition.canonical = canonical
        definition.args_nodes = args_nodes
        definition._args = _NOT_DECODED
        definition.scalars = scalars
        return definition

    def args_json(self) -> bytes:
        """The args as the compact JSON orjson writes for them, straight from the bytes."""
        return value.to_json(memoryview(self.canonical)[_ARGS_START:self.scalars[5]],
                             CHECKED_LIMITS)

    def read_args(self) -> dict:
        """A fresh decode of args that is not kept: reading never grows the job."""
        args = self._args
        if args is not _NOT_DECODED:
            return args
        # already checked, within the event's budgets, when the bytes were accepted
        return value.decode(memoryview(self.canonical)[_ARGS_START:self.scalars[5]],
                            CHECKED_LIMITS)

    @property
    def args(self) -> dict:
        """Args decoded once and cached (for callers that read them repeatedly)."""
        if self._args is _NOT_DECODED:
            self._args = self.read_args()
        return self._args

    def __getitem__(self, key: str) -> Any:
        index = _LAZY_SLOTS.get(key)
        if index is not None:
            return self.scalars[index]
        if key == "args":
            return self.read_args()
        if key == "retry_policy":
            return dict(RETRY_POLICY_V1)
        if key == "definition_version":
            return 1
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:  # Mapping.get, one call less
        index = _LAZY_SLOTS.get(key)
        if index is not None:
            return self.scalars[index]
        return self[key] if key in DEFINITION_KEYS else default

    def __contains__(self, key: object) -> bool:
        return key in DEFINITION_KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(_DEFINITION_ORDER)

    def __len__(self) -> int:
        return len(_DEFINITION_ORDER)

    def __repr__(self) -> str:
        return f"LazyDefinition({dict(self)!r})"


def live_definition(args_value: bytes, args_nodes: int, worker_key: str, queue_key: str,
                    max_attempts: int, scheduled_at: int | None,
                    timeout_ms: int) -> LazyDefinition:
    """``LazyDefinition.from_args_value`` with positional arguments (the engine's enqueue
    calls it once per live insert; a call with keywords costs more)."""
    if args_value[0] != 0x09:  # never empty: one JSON document is at least one Value
        raise invalid("args must be a map", "definition.args")
    scalars = (max_attempts, queue_key, scheduled_at, timeout_ms, worker_key,
               _ARGS_START + len(args_value))
    # jobs of one kind and args size: one lookup gives the shared scalars and the suffix.
    # Equal is not enough (True == 1 == 1.0, a str subclass equals its str): the types are
    # checked as the first definition of the kind had them checked
    known = _KINDS.get(scalars)
    if known is not None and type(max_attempts) is int and type(timeout_ms) is int \
            and type(queue_key) is str and type(worker_key) is str \
            and (scheduled_at is None or type(scheduled_at) is int):
        scalars, suffix = known
    else:
        suffix = _SUFFIXES.get(scalars[:5])
        if suffix is None or type(max_attempts) is not int or type(timeout_ms) is not int \
                or (scheduled_at is not None and type(scheduled_at) is not int):
            suffix = _definition_suffix(*scalars[:5])  # True == 1 as a dict key: checked again
        # args start at _ARGS_START by construction, and the three numbers are plain ints
        # (or None) now, so of _shared_scalars' checks only the keys' are left
        if type(queue_key) is str and type(worker_key) is str:
            scalars = _SCALARS.get(scalars) or _remember_scalars(scalars)
            if len(_KINDS) >= _SCALARS_MAX:
                _KINDS.clear()  # many distinct kinds: start over, stay bounded
            _KINDS[scalars] = (scalars, suffix)
    # what __init__ does, without its call (one per live insert)
    definition = _new_object(LazyDefinition)
    definition.canonical = b"".join((_ARGS_PREFIX, args_value, suffix))
    definition.args_nodes = args_nodes
    definition._args = _NOT_DECODED
    definition.scalars = scalars
    return definition


# (max_attempts, queue_key, scheduled_at, timeout_ms, worker_key, args end) of plain ints,
# None and str -> (those shared scalars, the canonical bytes after args): one lookup
_KINDS: dict[tuple, tuple[tuple, bytes]] = {}


# The canonical bytes after args, by (max_attempts, queue_key, scheduled_at, timeout_ms,
# worker_key): jobs of one kind share them, so an insert checks and encodes them once.
_SUFFIXES: dict[tuple, bytes] = {}
_SUFFIXES_MAX = 1024


def _definition_suffix(max_attempts: int, queue_key: str, scheduled_at: int | None,
                       timeout_ms: int, worker_key: str) -> bytes:
    """Check a definition's scalars as ``validate_definition`` does and return what follows
    args in its canonical bytes (remembered for the next definition with the same ones)."""
    scalars = {
        "args": {}, "definition_version": 1, "max_attempts": max_attempts,
        "queue_key": queue_key, "retry_policy": RETRY_POLICY_V1,
        "scheduled_at": scheduled_at, "timeout_ms": timeout_ms, "worker_key": worker_key,
    }
    validate_definition(scalars)
    scalars["args"] = value.Precoded(b"")
    scalars["retry_policy"] = _RETRY_POLICY_PRECODED
    suffix = value.encode_map(scalars)[_ARGS_START:]
    if len(_SUFFIXES) >= _SUFFIXES_MAX:
        _SUFFIXES.clear()  # many distinct scheduled_at values: start over, stay bounded
    _SUFFIXES[(max_attempts, queue_key, scheduled_at, timeout_ms, worker_key)] = suffix
    return suffix


# Jobs of one kind (and args of one size) have equal scalars: they share one tuple
# (bounded; plain ints and str only, so 1 never stands for True or 1.0)
_SCALARS: dict[tuple, tuple] = {}
_SCALARS_MAX = 1024


def _shared_scalars(scalars: tuple) -> tuple:
    max_attempts, queue_key, scheduled_at, timeout_ms, worker_key, args_end = scalars
    if type(max_attempts) is not int or type(timeout_ms) is not int \
            or type(args_end) is not int \
            or (scheduled_at is not None and type(scheduled_at) is not int) \
            or type(queue_key) is not str or type(worker_key) is not str:
        return scalars
    return _SCALARS.get(scalars) or _remember_scalars(scalars)


def _remember_scalars(scalars: tuple) -> tuple:
    """Share ``scalars`` from now on (the first job of its kind)."""
    if len(_SCALARS) >= _SCALARS_MAX:  # many distinct scheduled_at values: start over,
        _SCALARS.clear()  # and so do the kinds, which hold the same tuples (else a kind
        _KINDS.clear()  # would keep handing out a tuple that is no longer the shared one)
    _SCALARS[scalars] = scalars
    return scalars


MAX_ATTEMPTS, QUEUE_KEY, SCHEDULED_AT, TIMEOUT_MS, WORKER_KEY = range(5)  # in ``scalars``
_LAZY_SLOTS = {"max_attempts": 0, "queue_key": 1, "scheduled_at": 2, "timeout_ms": 3,
               "worker_key": 4}
_DEFINITION_ORDER = sorted(DEFINITION_KEYS)
# "args" sorts first among the keys, so its value always starts right after map header + key
_ARGS_PREFIX = b"\x09" + len(DEFINITION_KEYS).to_bytes(4, "big") + value.encode("args")
_ARGS_START = len(_ARGS_PREFIX)
value.PRECODED_TYPES[LazyDefinition] = "canonical"
_RETRY_POLICY_PRECODED = value.Precoded(value.encode(RETRY_POLICY_V1))


def _encoded_size(item: Any) -> int:
    """Bytes of ``item`` as a canonical Value (scalars without encoding them)."""
    if item is None or item is True or item is False:
        return 1
    kind = type(item)
    if kind is int or kind is float:
        return 9
    if kind is str:
        return 5 + (len(item) if item.isascii() else len(item.encode("utf-8")))
    return len(value.encode(item))


def _nodes(item: Any) -> int:
    """Values and map keys in ``item``, itself included (what the engine's measure counts)."""
    kind = type(item)
    if kind is dict:
        return 1 + sum(1 + _nodes(child) for child in item.values())
    if kind is list:
        return 1 + sum(_nodes(child) for child in item)
    return 1


_ARGS_END_KEY = b"\x06" + len("definition_version").to_bytes(4, "big") + b"definition_version"


def lazy_definition_in(encoded_map: bytes | memoryview, decoded: Mapping[str, Any],
                       key: str = "definition") -> Any:
    """``decoded[key]``, a validated definition, as a ``LazyDefinition`` over its own bytes
    inside ``encoded_map`` (the canonical map ``decoded`` was decoded from), so replay keeps
    the stored bytes instead of re-encoding the definition and holding its args.

    The definition's span follows from the encoded sizes of its neighbours (all decoded
    already), its args' end from the scalars after them; the bytes at both ends are checked,
    and anything unexpected returns ``decoded[key]`` unchanged (the slow, plain-dict path).
    """
    definition = decoded[key]
    if type(definition) is not dict or definition.keys() != DEFINITION_KEYS:
        return definition
    before = after = 0
    seen = False
    for name in decoded:  # entry sizes; the order of entries does not matter for sums
        if type(name) is not str or not name.isascii():
            return definition
        if name == key:
            seen = True
            continue
        size = 5 + len(name) + _encoded_size(decoded[name])
        if seen:
            after += size
        else:
            before += size
    start = 5 + before + 5 + len(key)
    return lazy_definition(bytes(encoded_map[start:len(encoded_map) - after]), definition)


def lazy_definition(canonical: bytes, definition: dict) -> Any:
    """A validated plain ``definition`` as a ``LazyDefinition`` over ``canonical``, its
    canonical bytes as read (args' end follows from the scalars after them and is checked
    against the next key's bytes). ``definition`` unchanged when the bytes do not check out.
    """
    tail = (5 + len("definition_version") + 9) + (5 + len("max_attempts") + 9) \
        + (5 + len("queue_key") + _encoded_size(definition["queue_key"])) \
        + (5 + len("retry_policy") + len(_RETRY_POLICY_PRECODED.canonical)) \
        + (5 + len("scheduled_at") + _encoded_size(definition["scheduled_at"])) \
        + (5 + len("timeout_ms") + 9) \
        + (5 + len("worker_key") + _encoded_size(definition["worker_key"]))
    args_end = len(canonical) - tail
    if (canonical[:_ARGS_START] != _ARGS_PREFIX or args_end <= _ARGS_START
            or canonical[args_end:args_end + len(_ARGS_END_KEY)] != _ARGS_END_KEY):
        return definition
    return LazyDefinition(canonical, (_ARGS_START, args_end), _nodes(definition["args"]),
                          definition["max_attempts"], definition["queue_key"],
                          definition["scheduled_at"], definition["timeout_ms"],
                          definition["worker_key"])


def args_json(definition: Mapping[str, Any]) -> bytes:
    """A definition's args as compact JSON (what an ``execute`` frame carries)."""
    if type(definition) is LazyDefinition:
        return definition.args_json()
    return value.to_json(value.encode(definition["args"]), CHECKED_LIMITS)


def decode_definition(buf: bytes | memoryview, limits: value.DecodeLimits | None = None) -> dict:
    """Decode and validate standalone definition bytes."""
    return validate_definition(decode_value(buf, limits, "definition"))
