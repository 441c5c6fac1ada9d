"""The storage-facing Value API: fixture values, error mapping, limits, round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.failures import RecoveryRefused, StorageFailure
from tay.storage.formats import value
from tay.storage.formats.value import DecodeLimits, EncodeError, decode, encode, locate

EXPECTED_V = {
    "V00": None, "V01": False, "V02": True, "V03": -(2**63), "V04": -1, "V05": 0,
    "V06": 2**63 - 1, "V07": 2**63, "V08": 2**64 - 1, "V09": 0.0, "V10": -0.0, "V11": 1.0,
    "V12": 5e-324, "V13": 1.7976931348623157e308, "V14": "",
}

EXPECTED_REASON = {
    "N1": "map_order", "N2": "map_order", "N3": "trailing_bytes", "N4": "unknown_tag",
    "X01": "negative_not_negative", "X02": "non_finite_float", "X03": "non_finite_float",
    "X04": "invalid_utf8", "X05": "invalid_utf8", "X06": "invalid_utf8",
}


def e1_payload(upstream) -> bytes:
    frame = upstream.event("E1")
    return frame[24:-4]


@pytest.mark.parametrize("name", sorted(EXPECTED_V))
def test_valid_standalone_values(upstream, name):
    decoded = decode(upstream.event(name))
    expected = EXPECTED_V[name]
    assert type(decoded) is type(expected) and decoded == expected
    if isinstance(expected, float):  # -0.0 and +0.0 kept bit-exact
        assert struct.pack(">d", decoded) == struct.pack(">d", expected)


@pytest.mark.parametrize("name", sorted(EXPECTED_V))
def test_encoder_reproduces_valid_values(upstream, name):
    assert encode(EXPECTED_V[name]) == upstream.event(name)


@pytest.mark.parametrize("name", sorted(EXPECTED_REASON))
def test_invalid_values_are_invalid_payload(upstream, name):
    with pytest.raises(RecoveryRefused) as info:
        decode(upstream.event(name))
    err = info.value
    assert (err.kind, err.reason) == ("invalid_payload", EXPECTED_REASON[name])
    assert err.extra["category"] == "corrupt"
    assert err.offset is not None


def test_float_one_is_not_integer_one():
    assert encode(1.0) != encode(1)
    assert type(decode(encode(1.0))) is float


def test_e1_payload_fits_its_exact_counters(upstream):
    payload = e1_payload(upstream)
    exact = decode(payload, DecodeLimits(depth=4, nodes=35, binary=185))
    assert exact == decode(payload)  # the same value as with the default limits
    assert sorted(exact) == ["at", "definition", "eligible_at", "expected_revision", "job_id"]
    assert exact["job_id"] == bytes(15) + b"\x01" and exact["at"] == 0
    assert encode(exact) == payload  # and it is canonical: re-encodes to the same bytes


@pytest.mark.parametrize(
    "limits, reason",
    [
        (DecodeLimits(depth=3, nodes=35, binary=185), "depth_limit"),
        (DecodeLimits(depth=4, nodes=34, binary=185), "node_limit"),
        (DecodeLimits(depth=4, nodes=35, binary=184), "binary_limit"),
    ],
)
def test_e1_one_below_any_limit_is_resource_limit(upstream, limits, reason):
    with pytest.raises(RecoveryRefused) as info:
        decode(e1_payload(upstream), limits)
    assert (info.value.kind, info.value.reason) == ("resource_limit", reason)
    assert info.value.extra["category"] == "resource_limit"


def test_truncated_payload_is_invalid_not_incomplete():
    with pytest.raises(RecoveryRefused) as info:
        decode(encode({"key": "value"})[:-2])
    assert (info.value.kind, info.value.reason) == ("invalid_payload", "truncated")


@pytest.mark.parametrize("bad", [object(), {1: 2}, 2**64, -(2**63) - 1, float("nan"), {3.0}])
def test_encode_refuses_what_the_format_cannot_hold(bad):
    with pytest.raises(EncodeError):
        encode(bad)


def test_limits_are_validated():
    with pytest.raises(ValueError, match="depth"):
        DecodeLimits(depth=-1)


def test_locate_adds_where_and_keeps_what(upstream):
    with pytest.raises(RecoveryRefused) as info:
        decode(upstream.event("N4"))
    located = locate(info.value, base_offset=100, path="segments/x.tay", sequence=7,
                     segment_id=3, stage="replay")
    assert isinstance(located, StorageFailure)
    assert located.report() == {
        "class": "invalid_payload", "reason": "unknown_tag", "path": "segments/x.tay",
        "offset": 100 + info.value.offset, "sequence": 7, "segment_id": 3, "stage": "replay",
        "category": "corrupt",
    }


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _same(a, b) -> bool:
    """Equality that tells -0.0 from 0.0 and 1 from 1.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=150, deadline=None)
@given(values)
def test_round_trip(obj):
    encoded = encode(obj)
    decoded = decode(encoded)
    assert _same(_canonical(obj), decoded)
    assert encode(decoded) == encoded


def _canonical(obj):
    """``obj`` with every map in canonical (bytewise sorted) key order, as decode gives it."""
    if isinstance(obj, dict):
        return {k: _canonical(obj[k]) for k in sorted(obj, key=lambda k: k.encode("utf-8"))}
    if isinstance(obj, list):
        return [_canonical(item) for item in obj]
    return obj


@settings(max_examples=150, deadline=None)
@given(values, st.data())
def test_truncation_is_always_refused(obj, data):
    encoded = encode(obj)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RecoveryRefused) as info:
        decode(encoded[:cut])
    assert info.value.kind == "invalid_payload"


def test_resource_reasons_match_the_codec():
    from tay import _native

    assert value.RESOURCE_REASONS == _native.RESOURCE_REASONS


def test_input_over_16_mib_is_a_resource_limit():
    with pytest.raises(RecoveryRefused) as info:
        decode(bytes(16 * 1024 * 1024 + 1))
    assert (info.value.kind, info.value.reason, info.value.extra["length"]) == (
        "resource_limit", "input_limit", 16 * 1024 * 1024 + 1)


def test_decode_accepts_a_memoryview_slice(upstream):
    frame = upstream.event("E1")
    assert decode(memoryview(frame)[24:-4]) == decode(e1_payload(upstream))
