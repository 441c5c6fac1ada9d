"""Protocol micro benchmarks (sans-IO): frame splitting, message decoding, whole sessions.

Run: .venv/bin/python -m pytest benchmarks/micro/test_protocol_bench.py --benchmark-only
Each round processes ``FRAMES`` frames (``extra_info``), so frames/s = FRAMES / mean.
The enqueue payload follows the reference profile (1 KiB string arg).
"""

from __future__ import annotations

import orjson

from tay.protocol.framing import FrameDecoder
from tay.protocol.limits import ProtocolLimits
from tay.protocol.session import ProtocolSession
from tay.protocol.values import decode_message

FRAMES = 2_000
LIMITS = ProtocolLimits(max_pending_requests=65_536)
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
HELLO = orjson.dumps({"version": 1, "type": "hello", "request_id": "h", "mode": "client",
                      "runtime_id": "bench", "max_concurrency": 0})


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def enqueue_payload(index: int) -> bytes:
    return orjson.dumps({"version": 1, "type": "enqueue", "request_id": f"{index:032x}",
                         "task": "bench.task", "args": ARGS, "options": {}})


ENQUEUES = [enqueue_payload(i) for i in range(FRAMES)]
STREAM = b"".join(frame(p) for p in ENQUEUES)
SMALL = frame(b'{"version":1,"type":"heartbeat","request_id":"0123456789abcdef"}') * FRAMES


def _split_in_reads(stream: bytes, read_size: int) -> list[bytes]:
    return [stream[i:i + read_size] for i in range(0, len(stream), read_size)]


def test_frame_decoder_64k_reads(benchmark):
    """Enqueue frames (~1.2 KB) arriving in 64 KiB socket reads, as a busy producer sends."""
    reads = _split_in_reads(STREAM, 65_536)
    benchmark.extra_info["frames_per_round"] = FRAMES

    def run() -> int:
        decoder = FrameDecoder(LIMITS.max_frame_bytes, LIMITS.buffer_limit)
        return sum(len(decoder.feed(chunk)) for chunk in reads)

    assert benchmark(run) == FRAMES


def test_frame_decoder_one_frame_per_read(benchmark):
    """Small frames one per read: the per-call overhead of the decoder."""
    single = frame(b'{"version":1,"type":"heartbeat","request_id":"0123456789abcdef"}')
    benchmark.extra_info["frames_per_round"] = FRAMES

    def run() -> int:
        decoder = FrameDecoder(LIMITS.max_frame_bytes, LIMITS.buffer_limit)
        return sum(len(decoder.feed(single)) for _ in range(FRAMES))

    assert benchmark(run) == FRAMES


def test_decode_message_enqueue(benchmark):
    """orjson + value-domain bounds + the 64-bit integer scan for one enqueue payload."""
    benchmark.extra_info["frames_per_round"] = FRAMES

    def run() -> int:
        return sum(len(decode_message(p, LIMITS)) for p in ENQUEUES)

    assert benchmark(run) == FRAMES * 6


def test_session_receive_enqueue_stream(benchmark):
    """Bytes in, typed requests out: framing, decoding, envelope and enqueue parsing."""
    reads = _split_in_reads(STREAM, 65_536)
    benchmark.extra_info["frames_per_round"] = FRAMES

    def run() -> int:
        session = ProtocolSession(LIMITS)
        session.receive(frame(HELLO))
        return sum(len(session.receive(chunk).outputs) for chunk in reads)

    assert benchmark(run) == FRAMES


def test_session_receive_heartbeats(benchmark):
    """Replies produced inside the session (no engine): the cheapest full round."""
    reads = _split_in_reads(SMALL, 65_536)
    benchmark.extra_info["frames_per_round"] = FRAMES

    def run() -> int:
        session = ProtocolSession(LIMITS)
        return sum(len(session.receive(chunk).outputs) for chunk in reads)

    assert benchmark(run) == FRAMES
