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


# Lengths about the x86-64 path's stripes (3 x 256 and 3 x 4096 bytes, each then a chain
# for the rest): every join of the three streams, with and without a remainder.
STRIPE_LENGTHS = [767, 768, 769, 775, 776, 1000, 1536, 2303, 3 * 4096 - 1, 3 * 4096,
                  3 * 4096 + 8, 3 * 4096 + 771, 2 * 3 * 4096 + 3 * 256 + 5]


@pytest.mark.parametrize("length", STRIPE_LENGTHS)
def test_long_buffers_agree_with_the_table_definition(length):
    """The C twin (striped on x86-64) gives the pure twin's CRC for any length, offset
    (alignment) and starting value, and chaining at any cut gives the whole's."""
    import random

    from tay._native import pure

    c = c_twin()
    rng = random.Random(length)
    data = bytes(rng.getrandbits(8) for _ in range(length + 3))
    for offset in (0, 1, 3):
        view = memoryview(data)[offset:offset + length]
        for seed in (0, 0xDEADBEEF):
            assert c.crc32c(view, seed) == pure.crc32c(view, seed)
        cut = rng.randrange(length + 1)
        assert c.crc32c(view[cut:], c.crc32c(view[:cut])) == pure.crc32c(view)


def test_long_buffers_agree_with_the_forced_software_path():
    """The striped path and the portable one, in one subprocess each, on the same bytes."""
    import os
    import subprocess
    import sys

    c_twin()
    code = ("import random\n"
            "from tay._native import c\n"
            "rng = random.Random(7)\n"
            f"for n in {STRIPE_LENGTHS!r} + [1 << 20]:\n"
            "    data = bytes(rng.getrandbits(8) for _ in range(n))\n"
            "    print(n, c.crc32c(data), c.crc32c(data, 12345))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = [subprocess.run([sys.executable, "-c", code], cwd=root, check=True, text=True,
                           capture_output=True,
                           env=dict(os.environ, TAY_CRC32C_SOFTWARE=forced, PYTHONPATH=root))
            .stdout for forced in ("0", "1")]
    assert runs[0] == runs[1] and len(runs[0].splitlines()) == len(STRIPE_LENGTHS) + 1
