"""Unix-socket framing: u32 big-endian length + payload."""

from __future__ import annotations

import pytest


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_complete_frames(native):
    buf = frame(b"ab") + frame(b"{}") + frame(b"x")
    assert native.split_frames(buf, 100) == ([(4, 6), (10, 12), (16, 17)], 17, None)


@pytest.mark.parametrize("partial", [b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05abc"])
def test_incomplete_tail_waits(native, partial):
    buf = frame(b"ab") + partial
    assert native.split_frames(buf, 100) == ([(4, 6)], 6, None)


def test_too_large_is_detected_before_payload(native):
    buf = frame(b"ok") + (101).to_bytes(4, "big")
    assert native.split_frames(buf, 100) == ([(4, 6)], 6, "frame_too_large")
    assert native.split_frames(frame(b"x" * 100), 100)[2] is None


def test_empty_frame(native):
    assert native.split_frames(frame(b"a") + bytes(4) + frame(b"b"), 100) == ([(4, 5)], 5, "empty_frame")


def test_empty_buffer(native):
    assert native.split_frames(b"", 100) == ([], 0, None)


def test_many_frames(native):
    buf = frame(b"z") * 70_000
    frames, consumed, error = native.split_frames(buf, 10)
    assert len(frames) == 70_000 and consumed == len(buf) and error is None
    assert frames[-1] == (len(buf) - 1, len(buf))
