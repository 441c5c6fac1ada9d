"""Store-v2 fixed markers (storage.md §3.2): STORE-V2 (``TAY2``), ADOPTION (``TAYA``) and
CURRENT (``TAYC``), plus the framing helpers the MANIFEST shares with them.

Fixed objects are checked in the order length, CRC, magic/version/reserved, field domains;
any fault is ``physical_corruption`` naming the object.
"""

from __future__ import annotations

from tay._frozen import Frozen, set_field
from typing import Any

from tay import _native
from tay.failures import RecoveryRefused

MARKER_SIZE = 28
CURRENT_SIZE = 76


def corrupt(reason: str, obj: str, **extra: Any) -> RecoveryRefused:
    return RecoveryRefused("physical_corruption", reason, object=obj, **extra)


def check_fixed(buf: bytes, magic: bytes, size: int, obj: str) -> None:
    """Length, then CRC, then magic / version / reserved (§3.2)."""
    if len(buf) != size:
        raise corrupt("length", obj, expected=size, actual=len(buf))
    check_crc(buf, obj)
    if buf[:4] != magic:
        raise corrupt("magic", obj)
    if buf[4] != 1:
        raise corrupt("version", obj, version=buf[4])
    if buf[5:8] != b"\x00\x00\x00":
        raise corrupt("reserved", obj)


def check_crc(buf: bytes, obj: str) -> None:
    """The trailing big-endian CRC32C covers every byte before it."""
    if _native.crc32c(buf[:-4]) != int.from_bytes(buf[-4:], "big"):
        raise corrupt("checksum", obj)


def check_id(raw: bytes, obj: str, name: str) -> bytes:
    if raw == bytes(16):
        raise corrupt(f"zero_{name}", obj)
    return raw


def seal(body: bytes) -> bytes:
    return body + _native.crc32c(body).to_bytes(4, "big")


def _id16(raw: bytes, name: str) -> bytes:
    if type(raw) is not bytes or len(raw) != 16 or raw == bytes(16):
        raise ValueError(f"{name} must be 16 nonzero bytes")
    return raw


def encode_store_v2(store_id: bytes) -> bytes:
    return seal(b"TAY2\x01\x00\x00\x00" + _id16(store_id, "store_id"))


def decode_store_v2(buf: bytes) -> bytes:
    """The STORE_ID of a STORE-V2 marker."""
    check_fixed(buf, b"TAY2", MARKER_SIZE, "STORE-V2")
    return check_id(bytes(buf[8:24]), "STORE-V2", "store_id")


def encode_adoption(nonce: bytes) -> bytes:
    return seal(b"TAYA\x01\x00\x00\x00" + _id16(nonce, "nonce"))


def decode_adoption(buf: bytes) -> bytes:
    """The nonce of an ADOPTION intent (names ``epochs/legacy-<nonce>``)."""
    check_fixed(buf, b"TAYA", MARKER_SIZE, "ADOPTION")
    return check_id(bytes(buf[8:24]), "ADOPTION", "nonce")


class Current(Frozen):
    __slots__ = ("store_id", "epoch_id", "manifest_digest")
    store_id: bytes
    epoch_id: bytes
    manifest_digest: bytes

    def __init__(self, store_id: bytes, epoch_id: bytes, manifest_digest: bytes) -> None:
        set_field(self, "store_id", store_id)
        set_field(self, "epoch_id", epoch_id)
        set_field(self, "manifest_digest", manifest_digest)


def encode_current(current: Current) -> bytes:
    if len(current.manifest_digest) != 32:
        raise ValueError("manifest_digest must be 32 bytes")
    return seal(b"TAYC\x01\x00\x00\x00" + _id16(current.store_id, "store_id")
                 + _id16(current.epoch_id, "epoch_id") + current.manifest_digest)


def decode_current(buf: bytes) -> Current:
    check_fixed(buf, b"TAYC", CURRENT_SIZE, "CURRENT")
    return Current(check_id(bytes(buf[8:24]), "CURRENT", "store_id"),
                   check_id(bytes(buf[24:40]), "CURRENT", "epoch_id"), bytes(buf[40:72]))
