"""Integer literals outside -2^63..2^64-1 close the connection instead of becoming floats."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.failures import ConnectionFatal
from tay.protocol.limits import ProtocolLimits
from tay.protocol.session import ProtocolSession
from tay.protocol.values import INT_MAX, INT_MIN, decode_message

LIMITS = ProtocolLimits()


def envelope(args_json: bytes) -> bytes:
    return b'{"version":1,"type":"heartbeat","request_id":"r","args":' + args_json + b"}"


@pytest.mark.parametrize("literal", [b"18446744073709551616", b"-9223372036854775809",
                                     b" \n -18446744073709551616",
                                     b"99999999999999999999999", b"-100000000000000000000"])
def test_out_of_range_integer_is_invalid_frame(literal: bytes) -> None:
    with pytest.raises(ConnectionFatal) as caught:
        decode_message(envelope(b'{"deep":[1,{"n":' + literal + b"}]}"), LIMITS)
    assert caught.value.code == "invalid_frame"
    assert literal.decode().strip() in caught.value.message


@pytest.mark.parametrize("value", [INT_MAX, INT_MIN, 2**63, -(2**63) + 1, 10**18])
def test_boundary_integers_stay_exact_integers(value: int) -> None:
    decoded = decode_message(envelope(str(value).encode()), LIMITS)
    assert decoded["args"] == value and type(decoded["args"]) is int


@pytest.mark.parametrize("text", [b'"184467440737095516160000"', b'"-99999999999999999999999"',
                                  b'":123456789012345678901234"', b'"a,[ -99999999999999999999"',
                                  b"1.8446744073709551616e19", b"123456789012345678901.5"])
def test_long_digit_runs_in_strings_and_floats_are_not_integers(text: bytes) -> None:
    decoded = decode_message(envelope(text), LIMITS)
    assert decoded["args"] == orjson.loads(text)


def test_session_closes_the_connection_with_one_uncorrelated_error() -> None:
    session = ProtocolSession(LIMITS)
    payload = envelope(b"[18446744073709551616]")
    received = session.receive(len(payload).to_bytes(4, "big") + payload)
    error = orjson.loads(received.close_frame[4:])
    assert error == {"version": 1, "type": "error",
                     "error": {"code": "invalid_frame", "message": error["error"]["message"]}}
    assert received.outputs == []


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=-(2**80), max_value=2**80))
def test_every_integer_is_either_exact_or_refused(value: int) -> None:
    payload = envelope(b'{"n":' + str(value).encode() + b"}")
    if INT_MIN <= value <= INT_MAX:
        decoded = decode_message(payload, LIMITS)["args"]["n"]
        assert decoded == value and type(decoded) is int
    else:
        with pytest.raises(ConnectionFatal):
            decode_message(payload, LIMITS)
