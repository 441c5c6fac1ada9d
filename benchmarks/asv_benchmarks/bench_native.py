"""asv: the native hot paths, each for the C twin and the pure twin.

Run from benchmarks/: ``asv run`` (or ``asv dev`` for a quick pass in the current env).
"""

from __future__ import annotations

import importlib
from pathlib import Path



def _twin(name: str):
    return importlib.import_module(f"tay._native.{name}")


def _job_payload() -> bytes:
    # asv imports this file from the project checkout, so the fixtures sit beside it.
    root = Path(__file__).resolve().parents[2]
    text = (root / "fixtures/upstream/events/v1/E1.hex").read_text()
    frame = bytes.fromhex("".join(text.split()))
    return frame[24 : 24 + int.from_bytes(frame[16:20], "big")]


class Crc32c:
    params = (["c", "pure"], [64, 4096, 65536])
    param_names = ["twin", "size"]

    def setup(self, twin, size):
        if twin == "pure" and size > 4096:
            raise NotImplementedError  # asv skips: it only measures the interpreter
        self.crc32c = _twin(twin).crc32c
        self.data = bytes(range(256)) * (size // 256) or bytes(size)

    def time_crc32c(self, twin, size):
        self.crc32c(self.data)


class Records:
    params = ["c", "pure"]
    param_names = ["twin"]

    def setup(self, twin):
        self.native = _twin(twin)
        self.records = [(1, 1, 1 + i, bytes([i % 251]) * 622) for i in range(1000)]
        self.stream = self.native.encode_records(self.records)

    def time_encode_1000x650b(self, twin):
        self.native.encode_records(self.records)

    def time_scan_1000x650b(self, twin):
        self.native.scan_records(self.stream, 0, len(self.stream), 16_777_216, 1)


class Value:
    params = ["c", "pure"]
    param_names = ["twin"]

    def setup(self, twin):
        self.native = _twin(twin)
        self.payload = _job_payload()
        self.value = self.native.value_decode(self.payload)

    def time_encode_job(self, twin):
        self.native.value_encode(self.value)

    def time_decode_job(self, twin):
        self.native.value_decode(self.payload)


class Frames:
    params = ["c", "pure"]
    param_names = ["twin"]

    def setup(self, twin):
        self.native = _twin(twin)
        payload = b'{"op":"enqueue"}' * 8
        self.buf = (len(payload).to_bytes(4, "big") + payload) * 64

    def time_split_frames(self, twin):
        self.native.split_frames(self.buf, 1 << 20)
