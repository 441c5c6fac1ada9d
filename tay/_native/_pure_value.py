"""Pure-Python canonical Value codec (storage.md §5): the reference twin of the C decoder.

Tags: 00 nil, 01 false, 02 true, 03 negative i64, 04 u64, 05 finite binary64, 06 text
(u32 length + strict UTF-8), 07 bytes (u32 length + raw), 08 list (u32 count + values),
09 map (u32 count + key/value pairs, keys tag 06 strictly ascending by UTF-8 bytes).

Error offsets (shared with the C twin): the offset of the value at fault (its tag byte) for
value-level errors, of the key for map-key errors, and of the first extra byte for
``trailing_bytes``. Limits are checked before anything is allocated.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from tay._native.errors import ValueCodecError

# Recursion ceiling for both directions: the decoders recurse once per level, and cyclic or
# absurdly deep Python objects must fail with a typed error, not RecursionError.
DEPTH_CEILING = 256
MAX_INPUT_BYTES = 16_777_216

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_F64_BITS = struct.Struct(">Q")
_EXPONENT_MASK = 0x7FF0000000000000


def check_limits(max_depth: int, max_nodes: int, max_binary: int) -> None:
    """Refuse nonsensical decode limits with a ValueError naming the parameter."""
    if not 0 <= max_depth <= DEPTH_CEILING:
        raise ValueError(f"max_depth must be 0..{DEPTH_CEILING}, got {max_depth}")
    if not 0 <= max_nodes <= 0xFFFFFFFF:
        raise ValueError(f"max_nodes must be 0..4294967295, got {max_nodes}")
    if not 0 <= max_binary <= 0xFFFFFFFF:
        raise ValueError(f"max_binary must be 0..4294967295, got {max_binary}")


# ----------------------------------------------------------------------------- encode


def value_encode(obj: Any) -> bytes:
    """Encode one Python object as a canonical Value; raise ValueCodecError when it cannot."""
    out = bytearray()
    _encode_into(out, obj, 1)
    return bytes(out)


def _encode_into(out: bytearray, obj: Any, depth: int) -> None:
    if obj is None:
        out.append(0x00)
    elif obj is True:
        out.append(0x02)
    elif obj is False:
        out.append(0x01)
    elif isinstance(obj, int):
        if 0 <= obj <= 0xFFFFFFFFFFFFFFFF:
            out += b"\x04" + _U64.pack(obj)
        elif -(1 << 63) <= obj < 0:
            out += b"\x03" + _I64.pack(obj)
        else:
            raise ValueCodecError("integer_out_of_range", len(out), f"{obj} is outside i64/u64")
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueCodecError("non_finite_float", len(out), repr(obj))
        out += b"\x05" + _F64.pack(obj)
    elif isinstance(obj, str):
        out += b"\x06" + _encode_text(obj, len(out))
    elif isinstance(obj, (bytes, bytearray)):
        out += b"\x07" + _U32.pack(len(obj)) + obj
    elif isinstance(obj, (list, tuple, dict)):
        if depth >= DEPTH_CEILING:
            raise ValueCodecError("depth_limit", len(out), f"nesting deeper than {DEPTH_CEILING}")
        if isinstance(obj, dict):
            _encode_map(out, obj, depth)
        else:
            out += b"\x08" + _U32.pack(len(obj))
            for item in obj:
                _encode_into(out, item, depth + 1)
    else:
        raise ValueCodecError("unsupported_type", len(out), type(obj).__name__)


def _encode_text(text: str, offset: int) -> bytes:
    """u32 length + UTF-8 body; lone surrogates cannot be encoded strictly."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueCodecError("invalid_utf8", offset, str(exc)) from None
    return _U32.pack(len(raw)) + raw


def _encode_map(out: bytearray, mapping: dict, depth: int) -> None:
    start = len(out)
    pairs = []
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise ValueCodecError("unsupported_type", start, f"map key {type(key).__name__}")
        pairs.append((_encode_text(key, start), item))
    # Sorting the length-prefixed forms would order by length first: sort by raw bytes.
    pairs.sort(key=lambda pair: pair[0][4:])
    out += b"\x09" + _U32.pack(len(pairs))
    for key_body, item in pairs:
        out += b"\x06" + key_body
        _encode_into(out, item, depth + 1)


# ----------------------------------------------------------------------------- decode


class _Decoder:
    """One decode run: the input plus the running node and binary budgets."""

    __slots__ = ("data", "size", "max_depth", "nodes_left", "binary_left")

    def __init__(self, data: bytes, max_depth: int, max_nodes: int, max_binary: int) -> None:
        self.data = data
        self.size = len(data)
        self.max_depth = max_depth
        self.nodes_left = max_nodes
        self.binary_left = max_binary

    def length_prefixed(self, pos: int) -> tuple[int, int]:
        """The u32 after the tag at ``pos`` and the offset after it; truncated if missing."""
        if pos + 5 > self.size:
            raise ValueCodecError("truncated", pos, "missing u32 length")
        return _U32.unpack_from(self.data, pos + 1)[0], pos + 5

    def body(self, pos: int) -> tuple[bytes, int]:
        """The body of the text/bytes value at ``pos``, charged to the binary budget."""
        length, start = self.length_prefixed(pos)
        if length > self.size - start:
            raise ValueCodecError("truncated", pos, f"body of {length} bytes")
        if length > self.binary_left:
            raise ValueCodecError("binary_limit", pos, f"body of {length} bytes")
        self.binary_left -= length
        return self.data[start : start + length], start + length

    def text(self, pos: int) -> tuple[str, bytes, int]:
        raw, end = self.body(pos)
        try:
            return raw.decode("utf-8"), raw, end
        except UnicodeDecodeError:
            raise ValueCodecError("invalid_utf8", pos, "text is not strict UTF-8") from None

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        """Decode the value at ``pos`` (already counted as a node); return it and its end."""
        if pos >= self.size:
            raise ValueCodecError("truncated", pos, "missing tag")
        if depth > self.max_depth:
            raise ValueCodecError("depth_limit", pos, f"depth {depth} > {self.max_depth}")
        tag = self.data[pos]
        if tag <= 0x02:
            return (None, False, True)[tag], pos + 1
        if tag <= 0x05:
            if pos + 9 > self.size:
                raise ValueCodecError("truncated", pos, "missing 8-byte body")
            return self.number(tag, pos), pos + 9
        if tag == 0x06:
            text, _, end = self.text(pos)
            return text, end
        if tag == 0x07:
            return self.body(pos)
        if tag == 0x08:
            return self.list(pos, depth)
        if tag == 0x09:
            return self.map(pos, depth)
        raise ValueCodecError("unknown_tag", pos, f"tag 0x{tag:02x}")

    def number(self, tag: int, pos: int) -> int | float:
        if tag == 0x04:
            return _U64.unpack_from(self.data, pos + 1)[0]
        if tag == 0x03:
            number = _I64.unpack_from(self.data, pos + 1)[0]
            if number >= 0:
                raise ValueCodecError("negative_not_negative", pos, f"tag 03 holds {number}")
            return number
        if _F64_BITS.unpack_from(self.data, pos + 1)[0] & _EXPONENT_MASK == _EXPONENT_MASK:
            raise ValueCodecError("non_finite_float", pos, "NaN or infinity")
        return _F64.unpack_from(self.data, pos + 1)[0]

    def reserve(self, pos: int, count: int, min_item_bytes: int, nodes: int) -> int:
        """Check a container count against remaining bytes, then the node budget."""
        after = pos + 5
        if count * min_item_bytes > self.size - after:
            raise ValueCodecError("truncated", pos, f"count {count} exceeds remaining bytes")
        if nodes > self.nodes_left:
            raise ValueCodecError("node_limit", pos, f"{nodes} more nodes")
        self.nodes_left -= nodes
        return after

    def list(self, pos: int, depth: int) -> tuple[list, int]:
        count, _ = self.length_prefixed(pos)
        cursor = self.reserve(pos, count, 1, count)
        items = []
        for _ in range(count):
            item, cursor = self.value(cursor, depth + 1)
            items.append(item)
        return items, cursor

    def map(self, pos: int, depth: int) -> tuple[dict, int]:
        count, _ = self.length_prefixed(pos)
        cursor = self.reserve(pos, count, 6, 2 * count)
        result: dict[str, Any] = {}
        previous: bytes | None = None
        for _ in range(count):
            if cursor >= self.size:
                raise ValueCodecError("truncated", cursor, "missing map key")
            if depth + 1 > self.max_depth:
                raise ValueCodecError("depth_limit", cursor, f"depth {depth + 1} > {self.max_depth}")
            if self.data[cursor] != 0x06:
                raise ValueCodecError("map_key_not_text", cursor, f"tag 0x{self.data[cursor]:02x}")
            key, raw, after_key = self.text(cursor)
            if previous is not None and raw <= previous:
                raise ValueCodecError("map_order", cursor, f"key {key!r} not after the previous key")
            previous = raw
            result[key], cursor = self.value(after_key, depth + 1)
        return result, cursor


def value_decode(
    buf: Any, max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
) -> Any:
    """Decode exactly one Value filling all of ``buf``; raise ValueCodecError otherwise."""
    check_limits(max_depth, max_nodes, max_binary)
    data = bytes(buf)
    if max_nodes < 1:
        raise ValueCodecError("node_limit", 0, "the root needs one node")
    decoder = _Decoder(data, max_depth, max_nodes - 1, max_binary)
    result, end = decoder.value(0, 1)
    if end != len(data):
        raise ValueCodecError("trailing_bytes", end, f"{len(data) - end} bytes after the value")
    return result
