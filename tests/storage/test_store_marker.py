"""STORE v1 marker: upstream fixtures, the fixed-object order, the encoder, staging names."""

from __future__ import annotations

import struct

import pytest

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats.store_marker import (
    decode_store_marker,
    encode_store_marker,
    parse_store_staging_name,
    store_staging_name,
)


def refusal(buf: bytes, path: str | None = None) -> RecoveryRefused:
    with pytest.raises(RecoveryRefused) as info:
        decode_store_marker(buf, path)
    return info.value


def with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", _native.crc32c(body))


def test_fixture_marker_is_valid(upstream):
    buf = upstream.segment("STORE")
    assert buf[-4:] == bytes.fromhex("ae533c93")
    assert decode_store_marker(buf) == upstream.store_id


def test_all_zero_store_id_is_refused(upstream):
    err = refusal(upstream.segment("s14_STORE"), path="/data/STORE")
    assert (err.kind, err.reason, err.path) == ("physical_corruption", "invalid_store_id",
                                                "/data/STORE")


def test_encoder_reproduces_fixture(upstream):
    assert encode_store_marker(upstream.store_id) == upstream.segment("STORE")


@pytest.mark.parametrize("size", [0, 3, 4, 5, 27])
def test_short_marker_is_refused_as_corruption(upstream, size):
    err = refusal(upstream.segment("STORE")[:size])
    assert err.kind == "physical_corruption"
    assert err.reason == "incomplete"


def test_long_marker_is_refused(upstream):
    assert refusal(upstream.segment("STORE") + b"\0").reason == "trailing_bytes"


@pytest.mark.parametrize(
    "body, kind, reason",
    [
        (b"TAYX\x01\x00\x00\x00" + bytes(range(1, 17)), "physical_corruption", "invalid_magic"),
        (b"TAYI\x00\x00\x00\x00" + bytes(range(1, 17)), "physical_corruption", "invalid_version"),
        (b"TAYI\x02\x00\x00\x00" + bytes(range(1, 17)), "unsupported_physical", "version"),
        (b"TAYI\x01\x01\x00\x00" + bytes(range(1, 17)), "unsupported_physical", "flags"),
        (b"TAYI\x01\x00\x00\x01" + bytes(range(1, 17)), "physical_corruption", "reserved_bytes"),
    ],
)
def test_fixed_object_order(body, kind, reason):
    err = refusal(with_crc(body))
    assert (err.kind, err.reason) == (kind, reason)


def test_version_is_checked_before_the_crc_and_the_length():
    assert refusal(b"TAYI\x02\xff").reason == "version"


def test_crc_is_checked_before_flags(upstream):
    buf = bytearray(upstream.segment("STORE"))
    buf[5] = 1  # flags, CRC not recomputed
    assert refusal(bytes(buf)).reason == "checksum"


def test_encoder_refuses_bad_ids():
    with pytest.raises(ValueError):
        encode_store_marker(bytes(16))
    with pytest.raises(ValueError):
        encode_store_marker(b"short")


def test_staging_name_round_trip():
    nonce = bytes(range(16))
    name = store_staging_name(nonce)
    assert name == ".tay-store-000102030405060708090a0b0c0d0e0f.tmp"
    assert parse_store_staging_name(name) == nonce
    assert parse_store_staging_name(name.upper()) is None
    assert parse_store_staging_name(".tay-store-00.tmp") is None
