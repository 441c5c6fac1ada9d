"""The STORE v1 marker (28 bytes) and the decode order shared by every fixed-size object.

``"TAYI" | u8 version=1 | u8 flags=0 | u16 reserved=0 | STORE_ID[16] | u32 CRC32C(0..23)``

The marker is written once at bootstrap and never rewritten; its STORE_ID names the store
and every segment header and footer must carry the same one.

:func:`check_fixed_object` is the one implementation of the fixed-object decode order
(magic, version, length, CRC, flags, reserved bytes) used here and by the segment header
and footer in ``tay.storage.formats.segment``. Field domains are checked by each object after it.
Refusals are ``RecoveryRefused`` (conventions in ``tay.storage.formats.value``) whose
``extra["object"]`` names the object.
"""

from __future__ import annotations

import struct

from tay import _native
from tay._frozen import LazyPattern
from tay.failures import RecoveryRefused

STORE_MAGIC = b"TAYI"
STORE_SIZE = 28
STORE_FILE_NAME = "STORE"
ZERO_ID = bytes(16)
_STAGING_NAME = LazyPattern(r"\.tay-store-([0-9a-f]{32})\.tmp")
_U32 = struct.Struct(">I")

Buffer = bytes | bytearray | memoryview


def refuse_object(
    category: str, reason: str, obj: str, offset: int = 0, **fields: object
) -> RecoveryRefused:
    """A refusal of a fixed-size object (``store_marker``, ``segment_header``, ``footer``)."""
    kind = {
        "corrupt": "physical_corruption",
        "unsupported": "unsupported_physical",
        "incomplete": "incomplete_tail",
    }[category]
    return RecoveryRefused(kind, reason, offset=offset, category=category, object=obj, **fields)


def check_fixed_object(buf: Buffer, magic: bytes, size: int, obj: str, offset: int = 0) -> None:
    """Steps 1-4 of the fixed-object order; ``buf`` holds the object and nothing else.

    1. magic prefix (``invalid_magic``), fewer than 5 bytes (``incomplete``);
    2. version 0 (``invalid_version``) or not 1 (``version``); short (``incomplete``),
       long (``trailing_bytes``);
    3. CRC over everything but the last 4 bytes (``checksum``);
    4. flags (``flags``), then the reserved bytes 6..7 (``reserved_bytes``).
    """
    length = len(buf)
    prefix = bytes(buf[: min(length, 4)])
    if prefix != magic[: len(prefix)]:
        raise refuse_object("corrupt", "invalid_magic", obj, offset)
    if length < 5:
        raise refuse_object("incomplete", "incomplete", obj, offset, available=length, needed=size)
    version = buf[4]
    if version == 0:
        raise refuse_object("corrupt", "invalid_version", obj, offset, version=0)
    if version != 1:
        raise refuse_object("unsupported", "version", obj, offset, version=version)
    if length < size:
        raise refuse_object("incomplete", "incomplete", obj, offset, available=length, needed=size)
    if length > size:
        raise refuse_object("corrupt", "trailing_bytes", obj, offset, length=length, size=size)
    if _native.crc32c(buf[: size - 4]) != _U32.unpack_from(buf, size - 4)[0]:
        raise refuse_object("corrupt", "checksum", obj, offset)
    if buf[5] != 0:
        raise refuse_object("unsupported", "flags", obj, offset, flags=buf[5])
    if buf[6] != 0 or buf[7] != 0:
        raise refuse_object("corrupt", "reserved_bytes", obj, offset)


def check_store_id(store_id: bytes, obj: str, offset: int = 0) -> None:
    """A STORE_ID is 16 bytes and never all zero."""
    if len(store_id) != 16 or store_id == ZERO_ID:
        raise refuse_object("corrupt", "invalid_store_id", obj, offset)


def encode_store_marker(store_id: bytes) -> bytes:
    """The 28 bytes of a STORE marker for ``store_id`` (16 bytes, not all zero)."""
    if not isinstance(store_id, (bytes, bytearray)) or len(store_id) != 16:
        raise ValueError("STORE_ID must be 16 bytes")
    if store_id == ZERO_ID:
        raise ValueError("STORE_ID must not be all zero")
    body = STORE_MAGIC + b"\x01\x00\x00\x00" + bytes(store_id)
    return body + _U32.pack(_native.crc32c(body))


def decode_store_marker(buf: Buffer, path: str | None = None) -> bytes:
    """The STORE_ID of a marker file's whole content, or ``RecoveryRefused`` naming ``path``."""
    try:
        check_fixed_object(buf, STORE_MAGIC, STORE_SIZE, "store_marker")
        store_id = bytes(buf[8:24])
        check_store_id(store_id, "store_marker", 8)
    except RecoveryRefused as err:
        # A marker is published whole by a no-replace rename: a short one is corruption,
        # never a torn tail that a later write could complete.
        kind = "physical_corruption" if err.kind == "incomplete_tail" else err.kind
        raise RecoveryRefused(kind, err.reason, path=path, offset=err.offset, **err.extra) from None
    return store_id


def store_staging_name(nonce: bytes) -> str:
    """``.tay-store-<32 hex>.tmp``: where the marker is written before its no-replace rename."""
    if len(nonce) != 16:
        raise ValueError("staging nonce must be 16 bytes")
    return f".tay-store-{nonce.hex()}.tmp"


def parse_store_staging_name(name: str) -> bytes | None:
    """The nonce of a well-formed STORE staging name, or None."""
    if not name.startswith(".tay-store-"):  # most names: no pattern compiled for them
        return None
    match = _STAGING_NAME.fullmatch(name)
    return bytes.fromhex(match.group(1)) if match else None
