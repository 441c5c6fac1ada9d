"""CRC32C vectors (storage.md §0.1), chaining, and buffer kinds, for both twins."""

from __future__ import annotations

import mmap

import pytest

from tests.build_guard import c_twin, hardware_crc32c, read_cpuinfo, software_crc_forced

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


def test_forced_software_path_in_subprocess():
    """TAY_CRC32C_SOFTWARE=1 selects the portable path, which gives the same results."""
    import os
    import subprocess
    import sys

    c_twin()
    code = (
        "from tay._native import c\n"
        "print(c.CRC32C_IMPLEMENTATION)\n"
        "data = bytes(range(256)) * 41 + b'123'\n"
        "print(c.crc32c(b'123456789'), c.crc32c(data), c.crc32c(data[7:], c.crc32c(data[:7])))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TAY_CRC32C_SOFTWARE="1", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True,
                         capture_output=True, text=True).stdout.split("\n")
    assert out[0] == "software"
    from tay._native import pure

    data = bytes(range(256)) * 41 + b"123"
    expected = pure.crc32c(data)
    assert out[1].split() == [str(0xE3069283), str(expected), str(expected)]


def test_the_c_module_uses_the_cpus_hardware_path():
    hardware = hardware_crc32c(read_cpuinfo())
    expected = "software" if hardware is None or software_crc_forced() else hardware
    assert c_twin().CRC32C_IMPLEMENTATION == expected


def test_package_facade_and_forced_python(monkeypatch):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TAY_NATIVE="python", PYTHONPATH=root)
    out = subprocess.run(
        [sys.executable, "-c", "import tay._native as n; print(n.IMPLEMENTATION, n.CRC32C_IMPLEMENTATION)"],
        env=env, cwd=root, check=True, capture_output=True, text=True).stdout.split()
    assert out == ["python", "software"]
