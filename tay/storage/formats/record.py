"""Record v1: the physical frame every journal entry travels in (docs/storage-format.md).

Layout (28 + N bytes, big-endian):
``"TAY\\0" | u8 version=1 | u8 type | u8 flags=0 | u8 schema | u64 sequence | u32 N |
u32 header_crc | payload[N] | u32 record_crc``. The header CRC covers bytes 0..19; the
record CRC covers bytes 0..19 and the payload (not the header CRC).

:func:`decode_record` follows the normative precedence exactly: the first failing step
wins, nothing taken from the header (the length included) is trusted before the header CRC
passes, and a failure never skips ahead looking for the next magic. Failures raise
``RecoveryRefused`` (see ``tay.storage.formats.value`` for the storage error conventions) with
``extra["category"]`` one of ``corrupt``, ``unsupported``, ``incomplete``,
``resource_limit`` and the facts of the spec's error term as named fields.
"""

from __future__ import annotations

import struct
from typing import Sequence

from tay import _native
from tay._frozen import Frozen, set_field
from tay.failures import RecoveryRefused
from tay.storage.formats.value import EncodeError

MAGIC = b"TAY\x00"
VERSION = 1
HEADER_SIZE = 24  # 20 bytes of fields + the header CRC
FIXED_SIZE = 28  # header + record CRC
MAX_PAYLOAD = 16_777_216
MAX_SEQUENCE = 2**64 - 1

_FIELDS = struct.Struct(">4sBBBBQI")  # magic, version, type, flags, schema, sequence, length
_U32 = struct.Struct(">I")

# category -> the recovery error kind a refusal of that category carries
KIND_OF_CATEGORY = {
    "corrupt": "physical_corruption",
    "unsupported": "unsupported_physical",
    "incomplete": "incomplete_tail",
    "resource_limit": "resource_limit",
}

Buffer = bytes | bytearray | memoryview


class Record(Frozen):
    """One decoded frame. ``offset``/``end`` locate it in the buffer it came from."""

    __slots__ = ("type", "schema", "sequence", "payload", "offset", "end")
    type: int
    schema: int
    sequence: int
    payload: bytes
    offset: int
    end: int

    def __init__(self, type: int, schema: int, sequence: int, payload: bytes, offset: int,
                 end: int) -> None:
        set_field(self, "type", type)
        set_field(self, "schema", schema)
        set_field(self, "sequence", sequence)
        set_field(self, "payload", payload)
        set_field(self, "offset", offset)
        set_field(self, "end", end)


def refuse(category: str, reason: str, offset: int, **fields: int) -> RecoveryRefused:
    """A record-level refusal: kind follows from category; fields become ``extra``."""
    return RecoveryRefused(
        KIND_OF_CATEGORY[category], reason, offset=offset, category=category, **fields
    )


def _check_prefix(buf: Buffer, offset: int, available: int) -> None:
    """Steps 1-3: magic, version, enough bytes for a header."""
    prefix = bytes(buf[offset : offset + min(available, 4)])
    if prefix != MAGIC[: len(prefix)]:
        raise refuse("corrupt", "invalid_magic", offset)
    if available < 5:
        raise refuse("incomplete", "incomplete_header", offset, available=available, needed=24)
    version = buf[offset + 4]
    if version == 0:
        raise refuse("corrupt", "invalid_format", offset, version=0)
    if version != VERSION:
        raise refuse("unsupported", "format", offset, version=version)
    if available < HEADER_SIZE:
        raise refuse("incomplete", "incomplete_header", offset, available=available, needed=24)


def _check_header_fields(
    offset: int, rtype: int, flags: int, schema: int, sequence: int, length: int
) -> None:
    """Steps 5-9, only ever run on a header whose CRC has passed."""
    if flags != 0:
        raise refuse("unsupported", "flags", offset, flags=flags)
    if rtype in (0, 255):
        raise refuse("corrupt", "reserved_type", offset, type=rtype)
    if schema == 0:
        raise refuse("corrupt", "invalid_schema", offset, schema=0)
    if sequence == 0:
        raise refuse("corrupt", "invalid_sequence", offset, sequence=0)
    if length > MAX_PAYLOAD:
        raise refuse(
            "corrupt", "payload_length_exceeds_format", offset, length=length, limit=MAX_PAYLOAD
        )


def decode_record(buf: Buffer, offset: int = 0, budget: int = MAX_PAYLOAD) -> Record:
    """Decode the frame that starts at ``offset``; the rest of ``buf`` is left untouched.

    ``budget`` is the operational payload limit L (0..16,777,216): a longer payload is a
    ``resource_limit`` refusal, which wins even over an incomplete payload.
    """
    if not 0 <= budget <= MAX_PAYLOAD:
        raise ValueError(f"record decode budget must be 0..{MAX_PAYLOAD}, got {budget}")
    available = max(0, len(buf) - offset)
    _check_prefix(buf, offset, available)
    header = bytes(buf[offset : offset + 20])
    header_crc = _native.crc32c(header)
    if header_crc != _U32.unpack_from(buf, offset + 20)[0]:
        raise refuse("corrupt", "header_checksum", offset)
    _, _, rtype, flags, schema, sequence, length = _FIELDS.unpack(header)
    _check_header_fields(offset, rtype, flags, schema, sequence, length)
    if length > budget:
        raise refuse("resource_limit", "resource_limit", offset, length=length, limit=budget)
    record_bytes = FIXED_SIZE + length
    if available < record_bytes:
        reason = "incomplete_payload" if available < HEADER_SIZE + length else "incomplete_checksum"
        raise refuse(
            "incomplete", reason, offset, type=rtype, schema=schema, sequence=sequence,
            length=length, record_bytes=record_bytes, available=available,
            missing=record_bytes - available,
        )
    payload = bytes(buf[offset + HEADER_SIZE : offset + HEADER_SIZE + length])
    if _native.crc32c(payload, header_crc) != _U32.unpack_from(buf, offset + 24 + length)[0]:
        raise refuse("corrupt", "record_checksum", offset, sequence=sequence)
    return Record(rtype, schema, sequence, payload, offset, offset + record_bytes)


def decode_stream(buf: Buffer, budget: int = MAX_PAYLOAD) -> list[Record]:
    """Every frame of ``buf`` back to back; the first refusal is raised as is.

    The refusal's offset tells where the valid prefix ends; nothing after it is read.
    """
    records: list[Record] = []
    offset = 0
    while offset < len(buf):
        record = decode_record(buf, offset, budget)
        records.append(record)
        offset = record.end
    return records


def _invalid(field: str, value: object, rule: str) -> EncodeError:
    return EncodeError("invalid_record", f"{field}={value!r}: {rule}")


def check_encodable(
    rtype: int, schema: int, sequence: int, payload: Buffer, version: int = VERSION, flags: int = 0
) -> None:
    """The decoder's domain rules (steps 2, 5-9) applied before writing a frame."""
    if version != VERSION:
        raise _invalid("version", version, "only framing version 1 is written")
    if flags != 0:
        raise _invalid("flags", flags, "must be 0")
    if not isinstance(rtype, int) or not 1 <= rtype <= 254:
        raise _invalid("type", rtype, "must be 1..254")
    if not isinstance(schema, int) or not 1 <= schema <= 255:
        raise _invalid("schema", schema, "must be 1..255")
    if not isinstance(sequence, int) or not 1 <= sequence <= MAX_SEQUENCE:
        raise _invalid("sequence", sequence, "must be 1..2^64-1")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise _invalid("payload", type(payload).__name__, "must be bytes")
    if len(payload) > MAX_PAYLOAD:
        raise _invalid("payload length", len(payload), f"must be <= {MAX_PAYLOAD}")


def encode_records(records: Sequence[tuple[int, int, int, Buffer]]) -> bytes:
    """Frames for ``(type, schema, sequence, payload)`` tuples, concatenated in order."""
    for rtype, schema, sequence, payload in records:
        check_encodable(rtype, schema, sequence, payload)
    return _native.encode_records(records)


def encode_record(
    rtype: int, schema: int, sequence: int, payload: Buffer, *, version: int = VERSION,
    flags: int = 0,
) -> bytes:
    """One frame. ``version`` and ``flags`` exist only so that bad values are refused."""
    check_encodable(rtype, schema, sequence, payload, version, flags)
    return _native.encode_records([(rtype, schema, sequence, payload)])


def frame_size(payload_length: int) -> int:
    """Bytes a frame with this payload length occupies on disk."""
    return FIXED_SIZE + payload_length

