"""Micro-benchmarks of the native hot paths, C twin vs pure twin (pytest-benchmark).

Run: make bench-micro, or .venv/bin/python -m pytest benchmarks/micro/test_native_bench.py --benchmark-only --timeout=0
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tay._native import pure

c = pytest.importorskip("tay._native.c")

ROOT = Path(__file__).resolve().parents[2]
E1 = bytes.fromhex("".join((ROOT / "fixtures/upstream/events/v1/E1.hex").read_text().split()))
JOB_PAYLOAD = E1[24 : 24 + int.from_bytes(E1[16:20], "big")]  # the reference job definition
JOB_VALUE = pure.value_decode(JOB_PAYLOAD)
RECORDS = [(1, 1, 1 + i, bytes([i % 251]) * 622) for i in range(1000)]  # 650-byte frames
FRAMES = b"".join(len(p).to_bytes(4, "big") + p for p in [b'{"op":"enqueue"}' * 8] * 64)
TWINS = [pytest.param(c, id="c"), pytest.param(pure, id="pure")]


@pytest.fixture
def software_crc():
    """Force the portable CRC path inside the C module for one benchmark."""
    c.lib.tay_crc32c_select(1)
    yield
    c.lib.tay_crc32c_select(0)


@pytest.mark.parametrize("size", [64, 4096, 65536])
@pytest.mark.parametrize("twin", TWINS)
def test_crc32c(benchmark, twin, size):
    data = bytes(range(256)) * (size // 256) or bytes(size)
    if twin is pure and size > 4096:
        pytest.skip("pure CRC at 64 KiB only measures the interpreter")
    benchmark.extra_info["bytes"] = size
    benchmark(twin.crc32c, data)


@pytest.mark.parametrize("size", [64, 4096, 65536])
def test_crc32c_forced_software(benchmark, software_crc, size):
    data = bytes(range(256)) * (size // 256) or bytes(size)
    benchmark.extra_info["bytes"] = size
    benchmark(c.crc32c, data)


@pytest.mark.parametrize("twin", TWINS)
def test_encode_records_650b(benchmark, twin):
    benchmark.extra_info["records"] = len(RECORDS)
    benchmark(twin.encode_records, RECORDS)


@pytest.mark.parametrize("twin", TWINS)
def test_scan_records_650b(benchmark, twin):
    stream = c.encode_records(RECORDS)
    benchmark.extra_info["records"] = len(RECORDS)
    result = benchmark(twin.scan_records, stream, 0, len(stream), 16_777_216, 1)
    assert result[2] == "end" and len(result[0]) == len(RECORDS)


@pytest.mark.parametrize("twin", TWINS)
def test_value_encode_job(benchmark, twin):
    assert benchmark(twin.value_encode, JOB_VALUE) == JOB_PAYLOAD


@pytest.mark.parametrize("twin", TWINS)
def test_value_decode_job(benchmark, twin):
    assert benchmark(twin.value_decode, JOB_PAYLOAD) == JOB_VALUE


@pytest.mark.parametrize("twin", TWINS)
def test_split_frames(benchmark, twin):
    frames, consumed, error = benchmark(twin.split_frames, FRAMES, 1 << 20)
    assert len(frames) == 64 and error is None


# value_to_json: what docs/native.md quotes per float and per byte of text.
FLOATS = [float(f"{i * 1.37e-3:.9g}") * 10 ** (i % 30 - 15) for i in range(1, 1001)]
FLOAT_VALUES = [c.value_encode(f) for f in FLOATS]
TEXT_1MB = c.value_encode("x" * 1_000_000)


def test_value_to_json_1000_floats(benchmark):
    benchmark.extra_info["values"] = len(FLOAT_VALUES)
    out = benchmark(lambda: [c.value_to_json(v, 64, 100_000, 16_777_216) for v in FLOAT_VALUES])
    assert [float(text) for text in out] == FLOATS


def test_value_to_json_text_1mb(benchmark):
    benchmark.extra_info["bytes"] = 1_000_000
    assert len(benchmark(c.value_to_json, TEXT_1MB, 64, 100_000, 16_777_216)) == 1_000_002
