"""Pure-Python twin of the JSON <-> canonical Value transcoders (csrc/json_value.c, value_json.c).

``json_to_value(json) -> bytes`` parses RFC 8259 JSON straight into canonical Value bytes;
``value_to_json(buf, ...) -> bytes`` writes a Value as the compact JSON orjson would write
for the decoded object. Both twins refuse the same inputs with the same reason and offset
(docs/native.md, "JSON <-> Value"): JSON offsets are input offsets, value_to_json reports
the decoder's reasons and offsets, then ``unsupported_type`` at the first bytes (tag 07).
"""

from __future__ import annotations

import re
import struct
from json.encoder import encode_basestring
from typing import Any

from tay._native._pure_value import DEPTH_CEILING, value_decode
from tay._native.errors import ValueCodecError

_U32 = struct.Struct(">I")
_U64_TAGGED = struct.Struct(">BQ")
_F64_TAGGED = struct.Struct(">Bd")
_SPACE = re.compile(rb"[ \t\n\r]*")
_PLAIN_RUN = re.compile(rb'[^"\\\x00-\x1f]*')
_DIGITS = re.compile(rb"[0-9]*")
_HEX4 = re.compile(rb"[0-9a-fA-F]{4}")
_SHORT_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
                  ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_LITERALS = {ord("t"): (b"true", b"\x02"), ord("f"): (b"false", b"\x01"),
             ord("n"): (b"null", b"\x00")}


class _JsonReader:
    """One parse: the input, the read position and the output being written."""

    __slots__ = ("data", "pos", "out")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.out = bytearray()

    def fail(self, reason: str, offset: int, detail: str = "") -> ValueCodecError:
        return ValueCodecError(reason, offset, detail)

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.data, self.pos).end()

    def peek(self) -> int:
        return self.data[self.pos] if self.pos < len(self.data) else -1

    def value(self, depth: int) -> None:
        self.skip_space()
        c = self.peek()
        if c in (0x7B, 0x5B):  # { [
            if depth >= DEPTH_CEILING:
                raise self.fail("depth_limit", self.pos, f"nesting deeper than {DEPTH_CEILING}")
            self.object(depth) if c == 0x7B else self.array(depth)
        elif c == 0x22:
            self.string()
        elif c in _LITERALS:
            word, tag = _LITERALS[c]
            if not self.data.startswith(word, self.pos):
                raise self.fail("malformed_json", self.pos, "bad literal")
            self.out += tag
            self.pos += len(word)
        elif c == 0x2D or 0x30 <= c <= 0x39:
            self.number()
        else:
            raise self.fail("malformed_json", self.pos, "expected a value")

    def string(self) -> None:
        quote = self.pos
        self.pos += 1
        body = bytearray()
        data = self.data
        while True:
            end = _PLAIN_RUN.match(data, self.pos).end()
            run = data[self.pos:end]
            try:
                run.decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail("invalid_utf8", quote, "string is not strict UTF-8") from None
            body += run
            self.pos = end
            if end >= len(data) or data[end] < 0x20:
                raise self.fail("malformed_json", end, "unterminated string")
            if data[end] == 0x22:
                break
            if end + 1 >= len(data):
                raise self.fail("malformed_json", len(data), "unterminated escape")
            escape = data[end + 1]
            if escape == 0x75:  # u
                body += chr(self.unicode_escape(quote)).encode("utf-8")
            elif escape in _SHORT_ESCAPES:
                body += _SHORT_ESCAPES[escape]
                self.pos += 2
            else:
                raise self.fail("malformed_json", end + 1, "bad escape")
        self.pos += 1
        self.out += b"\x06" + _U32.pack(len(body)) + body

    def unicode_escape(self, quote: int) -> int:
        data, at = self.data, self.pos
        if not _HEX4.fullmatch(data, at + 2, at + 6):
            raise self.fail("malformed_json", at, "bad \\u escape")
        point = int(data[at + 2:at + 6], 16)
        self.pos = at + 6
        if 0xDC00 <= point <= 0xDFFF:
            raise self.fail("invalid_utf8", quote, "lone low surrogate")
        if not 0xD800 <= point <= 0xDBFF:
            return point
        at = self.pos
        if not (data.startswith(b"\\u", at) and _HEX4.fullmatch(data, at + 2, at + 6)
                and 0xDC00 <= int(data[at + 2:at + 6], 16) <= 0xDFFF):
            raise self.fail("invalid_utf8", quote, "lone high surrogate")
        self.pos = at + 6
        return 0x10000 + ((point - 0xD800) << 10) + (int(data[at + 2:at + 6], 16) - 0xDC00)

    def digits(self) -> int:
        """Skip a run of ASCII digits; return how many."""
        end = _DIGITS.match(self.data, self.pos).end()
        count, self.pos = end - self.pos, end
        return count

    def number(self) -> None:
        """-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, read step by step like the C twin."""
        start = self.pos
        if self.peek() == 0x2D:
            self.pos += 1
        if self.peek() == 0x30:
            self.pos += 1
        elif not self.digits():
            raise self.fail("malformed_json", self.pos, "bad number")
        is_float = False
        if self.peek() == 0x2E:
            self.pos += 1
            if not self.digits():
                raise self.fail("malformed_json", self.pos, "no digit after '.'")
            is_float = True
        if self.peek() in (0x65, 0x45):
            self.pos += 1
            if self.peek() in (0x2B, 0x2D):
                self.pos += 1
            if not self.digits():
                raise self.fail("malformed_json", self.pos, "no digit in the exponent")
            is_float = True
        token = self.data[start:self.pos]
        if is_float:
            real = float(token)
            if real in (float("inf"), float("-inf")):
                raise self.fail("non_finite_float", start, "overflows binary64")
            self.out += _F64_TAGGED.pack(5, real)
            return
        number = int(token)
        if 0 <= number <= 0xFFFFFFFFFFFFFFFF:
            self.out += _U64_TAGGED.pack(4, number)
        elif -(1 << 63) <= number < 0:
            self.out += b"\x03" + struct.pack(">q", number)
        else:
            raise self.fail("integer_out_of_range", start, "outside -2^63..2^64-1")

    def array(self, depth: int) -> None:
        head = len(self.out)
        self.out += b"\x08\x00\x00\x00\x00"
        self.pos += 1
        count = 0
        self.skip_space()
        if self.peek() == 0x5D:
            self.pos += 1
        else:
            while True:
                self.value(depth + 1)
                count += 1
                if not self.next_item(0x5D):
                    break
        self.out[head + 1:head + 5] = _U32.pack(count)

    def next_item(self, closer: int) -> bool:
        self.skip_space()
        c = self.peek()
        if c == 0x2C:
            self.pos += 1
            return True
        if c == closer:
            self.pos += 1
            return False
        raise self.fail("malformed_json", self.pos, "expected ',' or a closing bracket")

    def object(self, depth: int) -> None:
        self.pos += 1
        members: list[tuple[bytes, int, bytes]] = []  # (key, key offset, encoded member)
        ascending = True
        self.skip_space()
        if self.peek() == 0x7D:
            self.pos += 1
        else:
            while True:
                self.skip_space()
                if self.peek() != 0x22:
                    raise self.fail("malformed_json", self.pos, "expected a key")
                key_at, start = self.pos, len(self.out)
                self.string()
                key = bytes(self.out[start + 5:])
                if members and members[-1][0] == key:
                    raise self.fail("duplicate_key", key_at, "duplicate object key")
                if members and members[-1][0] > key:
                    ascending = False
                self.skip_space()
                if self.peek() != 0x3A:
                    raise self.fail("malformed_json", self.pos, "expected ':'")
                self.pos += 1
                self.value(depth + 1)
                members.append((key, key_at, bytes(self.out[start:])))
                del self.out[start:]
                if not self.next_item(0x7D):
                    break
        if not ascending:
            members.sort(key=lambda member: member[0])
            later = [max(a[1], b[1]) for a, b in zip(members, members[1:]) if a[0] == b[0]]
            if later:
                raise self.fail("duplicate_key", min(later), "duplicate object key")
        self.out += b"\x09" + _U32.pack(len(members))
        for _, _, encoded in members:
            self.out += encoded


def json_to_value(json: Any) -> bytes:
    """Canonical Value bytes of one JSON document; ValueCodecError (input offset) if refused."""
    data = bytes(json)
    if len(data) > 0xFFFFFFFF:
        raise ValueError(f"JSON input of {len(data)} bytes exceeds 4 GiB")
    reader = _JsonReader(data)
    reader.value(1)
    reader.skip_space()
    if reader.pos != len(data):
        raise reader.fail("malformed_json", reader.pos, "data after the JSON value")
    return bytes(reader.out)


def json_to_value_measured(json: Any) -> tuple[bytes, int, int]:
    """``json_to_value(json)`` and the Value's depth and node count (every value and object
    key a node; the root at depth 1, a member's key and value one below its object)."""
    encoded = json_to_value(json)
    depth = nodes = 0
    stack = [(value_decode(encoded, 256, 0xFFFFFFFF, 0xFFFFFFFF), 1)]
    while stack:
        item, level = stack.pop()
        nodes += 1
        depth = max(depth, level)
        if type(item) is dict:
            nodes += len(item)
            stack.extend((child, level + 1) for child in item.values())
        elif type(item) is list:
            stack.extend((child, level + 1) for child in item)
    return encoded, depth, nodes


# ----------------------------------------------------------------------------- Value -> JSON


def value_to_json(
    buf: Any, max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
) -> bytes:
    """Compact JSON (orjson's bytes) of the Value in ``buf``; ValueCodecError if refused."""
    data = bytes(buf)
    decoded = value_decode(data, max_depth, max_nodes, max_binary)
    bytes_at = _first_bytes_offset(data)
    if bytes_at is not None:
        raise ValueCodecError("unsupported_type", bytes_at, "bytes have no JSON form")
    parts: list[str] = []
    _write_json(decoded, parts)
    return "".join(parts).encode("utf-8")


def _first_bytes_offset(data: bytes) -> int | None:
    """Offset of the first tag 07 in an already validated Value, walking in byte order."""
    pos, pending = 0, 1
    while pending:
        pending -= 1
        tag = data[pos]
        if tag == 0x07:
            return pos
        if tag <= 0x02:
            pos += 1
        elif tag <= 0x05:
            pos += 9
        elif tag == 0x06:
            pos += 5 + _U32.unpack_from(data, pos + 1)[0]
        else:
            pending += _U32.unpack_from(data, pos + 1)[0] * (2 if tag == 0x09 else 1)
            pos += 5
    return None


def _write_json(obj: Any, parts: list[str]) -> None:
    kind = type(obj)
    if kind is str:
        parts.append(encode_basestring(obj))
    elif obj is None:
        parts.append("null")
    elif kind is bool:
        parts.append("true" if obj else "false")
    elif kind is int:
        parts.append(str(obj))
    elif kind is float:
        parts.append(format_float(obj))
    elif kind is list:
        parts.append("[")
        for index, item in enumerate(obj):
            if index:
                parts.append(",")
            _write_json(item, parts)
        parts.append("]")
    else:
        parts.append("{")
        for index, (key, item) in enumerate(obj.items()):
            parts.append("," if index else "")
            parts.append(encode_basestring(key))
            parts.append(":")
            _write_json(item, parts)
        parts.append("}")


def format_float(real: float) -> str:
    """orjson's text for a finite float: shortest digits, fixed notation for E in -5..15."""
    sign = "-" if str(real).startswith("-") else ""
    mantissa, _, exponent_text = repr(abs(real)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    if not digits:
        return sign + "0.0"
    # the decimal point sits after `point` digits of all_digits; E is for d.ddd x 10^E
    point = len(whole) + int(exponent_text or 0)
    exponent = point - (len(all_digits) - len(digits)) - 1
    digits = digits.rstrip("0")
    if -5 <= exponent < 16:
        if exponent < 0:
            return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
        if len(digits) <= exponent + 1:
            return f"{sign}{digits}{'0' * (exponent + 1 - len(digits))}.0"
        return f"{sign}{digits[:exponent + 1]}.{digits[exponent + 1:]}"
    tail = f".{digits[1:]}" if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{tail}e{exponent:+d}"
