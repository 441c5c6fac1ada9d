"""CRC32C vectors (storage.md §0.1), chaining, and buffer kinds, for both twins."""

from __future__ import annotations

import mmap

import pytest

VECTORS = [
    (b"123456789", 0xE3069283),
    (b"", 0),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize(("data", "expected"), VECTORS)
def test_vectors(native, data, expected):
    assert native.crc32c(data) == expected


@pytest.mark.parametrize("split", [0, 1, 4, 5, 9])
def test_chaining_equals_whole(native, split):
    data = b"123456789"
    assert native.crc32c(data[split:], native.crc32c(data[:split])) == 0xE3069283


def test_buffer_kinds(native):
    data = bytes(range(32))
    with mmap.mmap(-1, 32) as mapped:
        mapped.write(data)
        assert native.crc32c(mapped) == 0x46DD794E
    assert native.crc32c(bytearray(data)) == 0x46DD794E
    assert native.crc32c(memoryview(b"xx" + data)[2:]) == 0x46DD794E


def test_refuses_non_buffer(native):
    with pytest.raises(TypeError):
        native.crc32c("123456789")
