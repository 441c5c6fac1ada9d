"""FrameDecoder.whole + keep (the session's route while nothing is unread) is feed: the same
frames, marks and ids, the same unread bytes and the same fatal error, for any stream of
good, report, oversized, empty and junk frames split into arbitrary reads."""

from __future__ import annotations

import struct

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.protocol.framing import FrameDecoder

MAX_FRAME = 200


def framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


_report = st.builds(lambda kind, rid: orjson.dumps(
    {"version": 1, "type": kind, "request_id": rid, "reservation_id": "r1",
     "execution_id": "e1"}), st.sampled_from(["started", "succeeded", "failed"]),
    st.text(min_size=1, max_size=8))
_frame = st.one_of(
    _report.map(framed),
    st.binary(max_size=40).map(framed),  # junk payloads (and the empty frame)
    st.just(struct.pack(">I", MAX_FRAME + 1) + b"x"),  # too large
    st.binary(min_size=1, max_size=6),  # a torn prefix
)


def feed_whole(decoder: FrameDecoder, data: bytes) -> list:
    if decoder.fatal is not None or decoder.unread:
        return decoder.feed(data)
    frames, consumed, error = decoder.whole(data)
    if consumed != len(data) or error is not None:
        decoder.keep(data, consumed, error)
    return frames


@settings(max_examples=300, deadline=None)
@given(st.lists(_frame, max_size=8), st.data())
def test_whole_and_keep_are_feed(frames, data) -> None:
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    by_feed = FrameDecoder(MAX_FRAME, domain=(64, 1_000, 100))
    by_whole = FrameDecoder(MAX_FRAME, domain=(64, 1_000, 100))
    for read in reads:
        assert feed_whole(by_whole, read) == by_feed.feed(read)
        assert bytes(by_whole.unread) == bytes(by_feed.unread)
        assert repr(by_whole.fatal) == repr(by_feed.fatal)
        if by_feed.fatal is not None:
            break
