"""Frames, envelopes and JSON rules of the SDK's wire codec, on literal bytes."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.errors import ProtocolError, RemoteTaskError, ServerError, ValidationError
from tay.sdk.wire import (decode_payload, encode_frame, envelope, normalize_json,
                          reply_identifier, server_error, validate_task_name)


def test_frame_is_length_prefixed_compact_sorted_utf8_json():
    frame = encode_frame(envelope("status", "r1", {"job_id": "ab", "zé": 1}))
    payload = '{"job_id":"ab","request_id":"r1","type":"status","version":1,"zé":1}'.encode()
    assert frame == len(payload).to_bytes(4, "big") + payload


def test_decode_accepts_legacy_v_and_returns_the_object():
    assert decode_payload(b'{"v":1,"type":"ping","request_id":"x"}')["type"] == "ping"


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b'{"version":1,"type":"a","request_id":"x","k":1,"k":2}', "repeats the key 'k'"),
        (b'{"version":1,"type":"a","request_id":"x","k":NaN}', "NaN"),
        (b"[1]", "must be a JSON object"),
        (b"\xff{}", "not UTF-8"),
        (b'{"version":2,"type":"a","request_id":"x"}', "unsupported protocol version 2"),
        (b'{"version":1,"type":"a"}', "request_id"),
        (b'{"version":1,"request_id":"x"}', "'type'"),
        (b'{"version":1,"type":"a","request_id":"' + b"x" * 129 + b'"}', "longer than 128"),
        (b"{", "not JSON"),
        (b"", "empty"),
    ],
)
def test_decode_refuses_malformed_payloads(payload, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        decode_payload(payload)


@pytest.mark.parametrize("vouched", [True, False])
def test_decode_refuses_repeats_and_keeps_big_integers_with_or_without_the_scan(monkeypatch, vouched):
    # the C scan (json_text.surely_exact) vouches for a text or leaves it to the walk; a text
    # it vouches for wrongly would be misread, so both paths are held to the same answers
    from tay.sdk import wire

    if not vouched:
        monkeypatch.setattr(wire, "surely_exact", lambda payload: False)
    with pytest.raises(ProtocolError, match="repeats the key 'k'"):
        decode_payload(b'{"version":1,"type":"a","request_id":"x","n":{"k":1,"k":2}}')
    big = decode_payload(b'{"version":1,"type":"a","request_id":"x","f":1.5,"n":123456789012345678901}')
    assert big["n"] == 123456789012345678901
    assert decode_payload(b'{"version":1,"type":"a","request_id":"x","n":[1,{"k":"v"}]}')["n"] == [1, {"k": "v"}]


def test_frame_limit_is_enforced_on_both_sides():
    with pytest.raises(ValidationError, match="frame limit is 256"):
        encode_frame(envelope("enqueue", "r", {"args": {"x": "y" * 400}}), max_frame_bytes=256)
    # receiving: tests/sdk/test_lean_path.py (the Link refuses a bad length as soon as it is whole)


@pytest.mark.parametrize("value", [(1, 2), {1, 2}, b"x", math.nan, math.inf, {1: "a"}, object()])
def test_non_json_values_are_refused_before_sending(value):
    with pytest.raises(ValidationError):
        normalize_json({"v": value})


def test_nesting_depth_is_bounded():
    deep = current = {}
    for _ in range(40):
        current["a"] = {}
        current = current["a"]
    with pytest.raises(ValidationError, match="deeper than 32"):
        normalize_json(deep)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_any_json_value_round_trips_through_a_frame(value):
    frame = encode_frame(envelope("x", "r", {"value": value}))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    payload = frame[4:]
    assert decode_payload(payload)["value"] == value


@pytest.mark.parametrize("name", ["", "a\x01b", "x" * 256, 5])
def test_task_names_are_validated(name):
    with pytest.raises(ValidationError):
        validate_task_name(name)


def test_server_errors_keep_code_and_details():
    error = server_error({"code": "capacity", "reason": "client_slots"})
    assert type(error) is ServerError and error.code == "capacity"
    assert error.details == {"code": "capacity", "reason": "client_slots"} and str(error) == "client_slots"
    assert isinstance(server_error({"code": "task_failed"}), RemoteTaskError)
    assert str(server_error({"code": "result_missing"})) == "Tay refused the request (result_missing)"


def test_reply_identifier_reads_flat_or_nested_id():
    assert reply_identifier({"job_id": "a"}, "job_id", "job") == "a"
    assert reply_identifier({"job": {"id": "b"}}, "job_id", "job") == "b"
    with pytest.raises(ProtocolError, match="no valid job_id"):
        reply_identifier({"type": "enqueued"}, "job_id", "job")
