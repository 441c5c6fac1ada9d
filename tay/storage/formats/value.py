"""The canonical Value encoding, as the storage layer sees it (docs/storage-format.md, "Value").

Events, manifest bodies and Store-v2 bodies are one canonical Value each. The byte work is
done by ``tay._native`` (C, or its pure-Python twin); this module adds the decode limits and
turns codec errors into the storage layer's one error type.

How storage errors work (shared by every storage reader):

* A reader that refuses bytes raises ``tay.failures.RecoveryRefused`` with ``kind`` (one of
  the fixed recovery error kinds), ``reason`` (the physical or payload class) and ``offset``
  (within the buffer it was given). Extra facts (``category``, lengths, expected values) sit
  in ``err.extra`` and appear in ``err.report()``.
* A layer that knows more (file path, segment id, the record's sequence, the base offset of
  the buffer) re-raises with :func:`locate`, which keeps kind, reason and extras.
* Encoders refuse caller mistakes with :class:`EncodeError` (a ``ValueError``): a bug in the
  caller, never a property of stored bytes.
"""

from __future__ import annotations

import struct
from tay._frozen import Frozen, set_field
from typing import Any, Iterable, Mapping

from tay import _native
from tay.failures import RecoveryRefused, StorageFailure

# Codec reasons that are operational budgets rather than invalid bytes.
RESOURCE_REASONS = _native.RESOURCE_REASONS

MAX_DECODE_INPUT = 16 * 1024 * 1024


class DecodeLimits(Frozen):
    """Operational decode budgets (never validity rules): exceeding one is ``resource_limit``."""

    __slots__ = ("depth", "nodes", "binary")
    depth: int
    nodes: int
    binary: int

    def __init__(self, depth: int = 64, nodes: int = 100_000,
                 binary: int = 16 * 1024 * 1024) -> None:
        for name, value in (("depth", depth), ("nodes", nodes), ("binary", binary)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"DecodeLimits.{name} must be an integer >= 0, got {value!r}")
            set_field(self, name, value)


DEFAULT_LIMITS = DecodeLimits()


class EncodeError(ValueError):
    """An encoder was handed something the format cannot hold (a caller bug)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def locate(
    err: StorageFailure,
    *,
    base_offset: int = 0,
    path: str | None = None,
    segment_id: int | None = None,
    sequence: int | None = None,
    stage: str | None = None,
) -> RecoveryRefused:
    """The same refusal with its location filled in; ``base_offset`` shifts the offset.

    Fields already known on ``err`` are kept unless a new value is given.
    """
    offset = None if err.offset is None else err.offset + base_offset
    return RecoveryRefused(
        err.kind,
        err.reason,
        path=path if path is not None else err.path,
        offset=offset,
        sequence=sequence if sequence is not None else err.sequence,
        segment_id=segment_id if segment_id is not None else err.segment_id,
        stage=stage if stage is not None else err.stage,
        **err.extra,
    )


def _codec_error_parts(exc: Exception) -> tuple[str, int | None]:
    """(reason, offset) of a ``tay._native.ValueCodecError``."""
    args = exc.args
    reason = getattr(exc, "reason", args[0] if args else "unknown")
    offset = getattr(exc, "offset", args[1] if len(args) > 1 else None)
    return reason, offset


def encode(obj: Any) -> bytes:
    """Canonical bytes of ``obj`` (None/bool/int/float/str/bytes/list/dict; keys are str;
    a ``PRECODED_TYPES`` object gives its stored bytes)."""
    attribute = PRECODED_TYPES.get(type(obj))
    if attribute is not None:
        return getattr(obj, attribute)
    try:
        return _native.value_encode(obj)
    except _native.ValueCodecError as exc:
        reason, offset = _codec_error_parts(exc)
        raise EncodeError(reason, f"cannot encode Value (at node {offset})") from None


_U64_TAGGED = struct.Struct(">BQ")
_KEY_ORDERS: dict[tuple, list[tuple[str, bytes]]] = {}
# Types that carry their own canonical encoding, and the attribute holding it: encode_map
# splices those bytes instead of walking the object (a live definition is encoded once).
PRECODED_TYPES: dict[type, str] = {}


def encode_map(mapping: Mapping[str, Any]) -> bytes:
    """``encode(dict(mapping))`` for the flat maps events are, without the generic walk.

    The live path encodes every event once: top-level keys are ordered once per key set
    (cached with their encoded form), unsigned ints, nil and bytes are written in place,
    a ``PRECODED_TYPES`` value contributes its stored canonical bytes, and any other value
    is spliced as ``encode(value)`` (canonical forms compose).
    """
    names = tuple(mapping)
    order = _KEY_ORDERS.get(names)
    if order is None:
        order = _key_order(names)
    return encode_fields(order, mapping)


def map_layout(names: Iterable[str]) -> list[tuple[str, bytes]]:
    """The canonical order of a map with these keys, for ``encode_fields``."""
    return list(_key_order(tuple(names)))


def encode_fields(order: list[tuple[str, bytes]], mapping: Mapping[str, Any]) -> bytes:
    """The map of ``order``'s keys (from ``map_layout``), each read from ``mapping``, as
    ``encode_map`` writes it; keys of ``mapping`` outside ``order`` are left out."""
    parts = [b"\x09", len(order).to_bytes(4, "big")]
    append = parts.append
    for name, key in order:
        item = mapping[name]
        append(key)
        kind = type(item)
        if kind is int and 0 <= item <= 0xFFFFFFFFFFFFFFFF:
            append(_U64_TAGGED.pack(4, item))
        elif item is None:
            append(b"\x00")
        elif kind is bytes:
            append(b"\x07" + len(item).to_bytes(4, "big"))
            append(item)
        elif kind in PRECODED_TYPES:
            append(getattr(item, PRECODED_TYPES[kind]))
        else:
            append(encode(item))
    return b"".join(parts)


class Precoded:
    """A value already in canonical form: ``encode_map`` splices ``canonical`` unchanged."""

    __slots__ = ("canonical",)

    def __init__(self, canonical: bytes) -> None:
        self.canonical = canonical


PRECODED_TYPES[Precoded] = "canonical"


def encode_json(json_text: bytes) -> bytes:
    """Canonical bytes of one JSON document, transcoded without building Python objects.

    Object keys are sorted by UTF-8 bytes; duplicate keys, lone surrogates, integers outside
    -2^63..2^64-1, numbers overflowing binary64, nesting of 256 containers and malformed
    JSON raise ``EncodeError`` (the offset is in ``json_text``).
    """
    try:
        return _native.json_to_value(json_text)
    except _native.ValueCodecError as exc:
        reason, offset = _codec_error_parts(exc)
        raise EncodeError(reason, f"cannot transcode JSON (at input offset {offset})") from None


def encode_json_measured(json_text: bytes) -> tuple[bytes, int, int]:
    """``encode_json(json_text)`` and the Value's depth and node count, counted as
    ``tay.engine.validation.values.measure`` counts them; the same ``EncodeError`` refusals."""
    try:
        return _native.json_to_value_measured(json_text)
    except _native.ValueCodecError as exc:
        reason, offset = _codec_error_parts(exc)
        raise EncodeError(reason, f"cannot transcode JSON (at input offset {offset})") from None


def _refuse_oversized_input(buf: bytes | bytearray | memoryview) -> None:
    """Both readers refuse more than ``MAX_DECODE_INPUT`` bytes before the native walk."""
    if len(buf) > MAX_DECODE_INPUT:
        raise RecoveryRefused(
            "resource_limit", "input_limit", offset=0, category="resource_limit",
            length=len(buf), limit=MAX_DECODE_INPUT,
        )


def to_json(buf: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS) -> bytes:
    """The compact JSON orjson would write for ``decode(buf, limits)``, without the objects.

    Refuses what ``decode`` refuses, with the same ``RecoveryRefused``; a Value holding
    bytes (no JSON form) raises ``EncodeError("unsupported_type", ...)``.
    """
    _refuse_oversized_input(buf)
    try:
        return _native.value_to_json(buf, limits.depth, limits.nodes, limits.binary)
    except _native.ValueCodecError as exc:
        reason, offset = _codec_error_parts(exc)
        if reason == "unsupported_type":
            raise EncodeError(reason, f"bytes at offset {offset} have no JSON form") from None
        kind, category = (("resource_limit", "resource_limit") if reason in RESOURCE_REASONS
                          else ("invalid_payload", "corrupt"))
        raise RecoveryRefused(kind, reason, offset=offset, category=category) from None


def _key_order(names: tuple) -> list[tuple[str, bytes]]:
    """The keys in canonical order (by UTF-8 bytes) with their encoded text form."""
    for name in names:
        if type(name) is not str:
            raise EncodeError("unsupported_type", f"map key {type(name).__name__}")
    order = [(name, encode(name)) for name in sorted(names, key=lambda n: n.encode("utf-8"))]
    if len(_KEY_ORDERS) < 256:  # event key sets are few; never grow without bound
        _KEY_ORDERS[names] = order
    return order


def decode(buf: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decode exactly one canonical Value filling all of ``buf``.

    Raises ``RecoveryRefused`` with kind ``resource_limit`` (depth/node/binary budgets) or
    ``invalid_payload`` (anything else: unknown tag, truncation, trailing bytes, map order,
    non-text keys, non-canonical integers, NaN/Inf, bad UTF-8). ``offset`` is the byte
    within ``buf`` where decoding stopped.
    """
    _refuse_oversized_input(buf)
    try:
        return _native.value_decode(buf, limits.depth, limits.nodes, limits.binary)
    except _native.ValueCodecError as exc:
        reason, offset = _codec_error_parts(exc)
        if reason in RESOURCE_REASONS:
            raise RecoveryRefused(
                "resource_limit", reason, offset=offset, category="resource_limit"
            ) from None
        raise RecoveryRefused(
            "invalid_payload", reason, offset=offset, category="corrupt"
        ) from None
