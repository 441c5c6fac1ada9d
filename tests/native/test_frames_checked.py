"""``split_frames_marked``'s clean mark / ``json_domain_clean``: the server's per-buffer fast path.

A clean mark is a promise that the exact protocol decoder (tay.protocol.values) accepts the
payload as orjson decodes it; the scan may leave anything unclean (the exact decoder then
runs), never the other way round. The C and pure twins mark alike."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay._native import pure
from tay.failures import ConnectionFatal
from tay.protocol.limits import ProtocolLimits
from tay.protocol.values import decode_message
from tests.build_guard import c_twin
from tests.native.test_json_members import tricky_text, tricky_values
from tests.storage.json_strategies import SETTINGS, json_values

c = c_twin()
SMALL = ProtocolLimits(max_depth=4, max_nodes=12, max_key_bytes=6)
BOUNDS = [ProtocolLimits(), SMALL]


def bounds(limits: ProtocolLimits) -> tuple[int, int, int]:
    return limits.max_depth, limits.max_nodes, limits.max_key_bytes


def texts(value, ascii_only: bool, indent) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent,
                      separators=None if indent else (",", ":")).encode("utf-8", "surrogatepass")


def exact(payload: bytes, limits: ProtocolLimits):
    try:
        return decode_message(payload, limits)
    except ConnectionFatal:
        return None


objects = st.dictionaries(st.text(max_size=8) | tricky_text, json_values | tricky_values,
                          max_size=6)


@SETTINGS
@given(objects | json_values, st.booleans(), st.sampled_from([None, 1]),
       st.sampled_from(BOUNDS))
def test_clean_means_the_exact_decoder_accepts_it(value, ascii_only, indent, limits):
    text = texts(value, ascii_only, indent)
    marks = {twin.json_domain_clean(text, *bounds(limits)) for twin in (c, pure)}
    assert len(marks) == 1  # the twins agree
    if marks.pop():
        assert exact(text, limits) == orjson.loads(text)


@SETTINGS
@given(st.binary(max_size=120) | st.builds(lambda s: s.encode("utf-8", "surrogatepass"),
                                             st.text(alphabet='{}[]":,\\ a1e-9tfn', max_size=60)),
       st.sampled_from(BOUNDS))
def test_twins_agree_on_any_bytes(data, limits):
    clean = c.json_domain_clean(data, *bounds(limits))
    assert clean == pure.json_domain_clean(data, *bounds(limits))
    if clean:
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError:
            return  # not JSON: the mark means nothing, orjson refuses it first
        if type(decoded) is dict:
            assert exact(data, limits) == decoded


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}',  # a repeated key
    b'{"o":{"k":1,"k":1}}',
    b'{"a\\u0062":1,"ab":2}',  # an escaped key: left to the exact check
    b'{"n":12345678901234567890}',  # 20 digits: maybe beyond 64 bits
    b'{"n":-1234567890123456789}',
    b'{"' + b"k" * 7 + b'":1}',  # a key over max_key_bytes (6)
    b'{"a":[[[[1]]]]}',  # 5 levels of containers (max 4)
    b'{"a":[1,2,3,4,5,6,7,8,9,10,11,12]}',  # 13 nodes (max 12)
    b'[1]', b'"x"', b'1', b'', b'{"a":1} {}', b'{"a":1}]',
])
def test_what_is_never_clean(text):
    for twin in (c, pure):
        assert not twin.json_domain_clean(text, *bounds(SMALL)), text


def test_at_the_bounds_is_clean():
    for twin in (c, pure):
        assert twin.json_domain_clean(b'{"a":[[[1]]]}', *bounds(SMALL))  # depth 4
        assert twin.json_domain_clean(b'{"a":[1,2,3,4,5,6,7,8,9,10]}', *bounds(SMALL))  # 12
        assert twin.json_domain_clean(b'{"kkkkkk":1,"n":123456789012345678}', *bounds(SMALL))
        assert twin.json_domain_clean(b' {"s":"a\\"b:\\\\","t":[true,false,null,-1.5e3]} ',
                                      *bounds(ProtocolLimits()))


def test_split_frames_marked_splits_like_split_frames(native):
    def frame(payload: bytes) -> bytes:
        return len(payload).to_bytes(4, "big") + payload

    buf = frame(b'{"a":1}') + frame(b'{"a":1,"a":1}') + frame(b"[") + bytes(4)
    frames, consumed, error = native.split_frames_marked(buf, 100, 64, 1000, 255)
    assert (frames, consumed, error) == (
        [(4, 11, 1, None), (15, 28, 0, None), (32, 33, 0, None)], 33, "empty_frame")
    many = frame(b"{}") * 200  # more frames than one C call returns
    frames, consumed, error = native.split_frames_marked(many, 100, 64, 1000, 255)
    assert len(frames) == 200 and all(mark == 1 for _, _, mark, _ in frames)
    assert consumed == len(many)
    assert native.split_frames(many, 100)[0] == [(start, end) for start, end, _, _ in frames]


def test_split_frames_marked_reads_any_buffer_and_refuses_limits_out_of_range(native):
    many = (len(b'{"k":[1]}').to_bytes(4, "big") + b'{"k":[1]}') * 130 + b"\x00\x00"
    expected = native.split_frames_marked(many, 100, 64, 1000, 255)
    assert len(expected[0]) == 130 and expected[1] == len(many) - 2 and expected[2] is None
    for buffer in (bytearray(many), memoryview(many)):  # the unread buffer is a bytearray
        assert native.split_frames_marked(buffer, 100, 64, 1000, 255) == expected
    for limits in ((-1, 64, 1000, 255), (100, 1 << 32, 1000, 255), (100, 64, 1 << 64, 255),
                   (100, 64, 1000, -5)):
        with pytest.raises(ValueError):
            native.split_frames_marked(many, *limits)
        with pytest.raises(ValueError):  # a decoder's scan checks them once, when made
            native.FrameScan(*limits)


def test_a_frame_scan_is_reused_across_reads_of_every_size(native):
    """One FrameScan per decoder: each split stands alone (no columns of an earlier read
    leak into a later one), whatever a read held, up to several calls' worth of rows."""
    def frame(payload: bytes) -> bytes:
        return len(payload).to_bytes(4, "big") + payload

    report = frame(b'{"version":1,"type":"started","request_id":"q","reservation_id":"r",'
                   b'"execution_id":"e"}')
    scan = native.FrameScan(100, 64, 1000, 255)
    reads = [frame(b'{"a":1}') * 150, report, frame(b"[1]")[:5], b"", report * 3 + bytes(4),
             (frame(b"{}") + report) * 70, frame(b"x" * 101), frame(b'{"a":1,"a":2}')]
    for buf in reads + reads[::-1]:
        for given in (buf, bytearray(buf)):
            assert scan.split(given) == native.split_frames_marked(given, 100, 64, 1000, 255)


@pytest.mark.parametrize("text", [b"{}", b' {"a":1} ', b"[]", b"{}:", b"{} x", b"{}}",
                                  b'{"a":{}}', b'{"a":[1,{"b":2}]}\n', b'{"ab":"c"}', b"{",
                                  b'{"a":1,"a":2}', b"{}{}"])
@pytest.mark.parametrize("limits", [(0, 0, 0), (1, 0, 0), (1, 1, 1), (2, 2, 2), (3, 4, 1),
                                    (64, 1000, 255)])
def test_the_smallest_limits_mark_as_the_twin(text, limits) -> None:
    # the walk counts the top-level object as a node that is never over the limit
    assert c.json_domain_clean(text, *limits) == pure.json_domain_clean(text, *limits)
