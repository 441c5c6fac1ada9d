"""Canonical Value codec (storage.md §5) against the upstream V/X/N/E fixtures."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay._native.errors import ValueCodecError
from tests.native.conftest import FIXTURES, fixture_bytes, record_payload

E1_PAYLOAD = record_payload(fixture_bytes("events/v1/E1.hex"))

V_EXPECTED = {
    "V00": None, "V01": False, "V02": True, "V03": -(2**63), "V04": -1, "V05": 0,
    "V06": 2**63 - 1, "V07": 2**63, "V08": 2**64 - 1, "V09": 0.0, "V10": -0.0, "V11": 1.0,
    "V12": 5e-324, "V13": 1.7976931348623157e308, "V14": "",
}
X_REASONS = {
    "X01": "negative_not_negative", "X02": "non_finite_float", "X03": "non_finite_float",
    "X04": "invalid_utf8", "X05": "invalid_utf8", "X06": "invalid_utf8",
}
N_REASONS = {"N1": "map_order", "N2": "map_order", "N3": "trailing_bytes", "N4": "unknown_tag"}


def test_fixture_digests():
    for line in (FIXTURES / "events/v1/SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        assert hashlib.sha256(fixture_bytes(f"events/v1/{name}")).hexdigest() == digest, name


@pytest.mark.parametrize("name", sorted(V_EXPECTED))
def test_valid_fixtures_decode_and_reencode(native, name):
    data = fixture_bytes(f"events/v1/{name}.hex")
    value = native.value_decode(data)
    expected = V_EXPECTED[name]
    assert type(value) is type(expected) and value == expected
    if isinstance(expected, float):
        assert math.copysign(1, value) == math.copysign(1, expected)
    assert native.value_encode(value) == data


@pytest.mark.parametrize("name", sorted(X_REASONS) + sorted(N_REASONS))
def test_invalid_fixtures(native, name):
    with pytest.raises(ValueCodecError) as caught:
        native.value_decode(fixture_bytes(f"events/v1/{name}.hex"))
    assert caught.value.reason == {**X_REASONS, **N_REASONS}[name]


def test_n5_is_a_valid_value(native):
    value = native.value_decode(fixture_bytes("events/v1/N5.hex"))
    assert set(value) == {"at", "expected_revision", "job_id"}


@pytest.mark.parametrize("name", ["E1", "E2", "E3", "E4", "E5", "E6"])
def test_event_payloads_round_trip(native, name):
    payload = record_payload(fixture_bytes(f"events/v1/{name}.hex"))
    assert native.value_encode(native.value_decode(payload)) == payload


def test_e1_limits_are_exact(native):
    assert native.value_decode(E1_PAYLOAD, 4, 35, 185) == native.value_decode(E1_PAYLOAD)
    for limits, reason in [((3, 35, 185), "depth_limit"), ((4, 34, 185), "node_limit"),
                           ((4, 35, 184), "binary_limit")]:
        with pytest.raises(ValueCodecError) as caught:
            native.value_decode(E1_PAYLOAD, *limits)
        assert caught.value.reason == reason and caught.value.is_resource_error


@pytest.mark.parametrize(
    ("data", "reason", "offset"),
    [
        (b"", "truncated", 0),
        (b"\x04\x00", "truncated", 0),
        (b"\x06\x00\x00\x00\x05abc", "truncated", 0),
        (b"\x08\x00\x00\x00\x02\x00", "truncated", 0),  # count exceeds remaining bytes
        (b"\x09\x00\x00\x00\x01\x06\x00\x00", "truncated", 0),  # 6 x count > remaining
        (b"\x08\x00\x00\x00\x02\x00\x04", "truncated", 6),
        (b"\x09\x00\x00\x00\x01\x04\x00\x00\x00\x00\x00\x00\x00\x00", "map_key_not_text", 5),
        (b"\x09\x00\x00\x00\x02\x06\x00\x00\x00\x01c\x00\x06\x00\x00\x00\x01b\x00", "map_order", 12),
        (b"\x00\x00", "trailing_bytes", 1),
        (b"\x0b", "unknown_tag", 0),
        (b"\x08\x00\x00\x00\x01\xff", "unknown_tag", 5),
        (b"\x07\x00\x00\x00\x02\xff\xfe", None, None),
    ],
)
def test_decode_errors_and_offsets(native, data, reason, offset):
    if reason is None:
        assert native.value_decode(data) == b"\xff\xfe"
        return
    with pytest.raises(ValueCodecError) as caught:
        native.value_decode(data)
    assert (caught.value.reason, caught.value.offset) == (reason, offset)


def test_prefix_keys_sort_first(native):
    value = {"ab": 1, "a": 2, "b": 3, "\u00e9": 4, "z": 5}
    encoded = native.value_encode(value)
    assert list(native.value_decode(encoded)) == ["a", "ab", "b", "z", "\u00e9"]


def test_node_budget_checked_before_allocation(native):
    huge_list = b"\x08\xff\xff\xff\xff"
    with pytest.raises(ValueCodecError) as caught:
        native.value_decode(huge_list + bytes(10))
    assert caught.value.reason == "truncated"
    with pytest.raises(ValueCodecError) as caught:
        native.value_decode(b"\x08\x00\x00\x00\x03" + bytes(3), max_nodes=3)
    assert caught.value.reason == "node_limit"
    assert native.value_decode(b"\x08\x00\x00\x00\x03" + bytes(3), max_nodes=4) == [None] * 3


def test_depth_counts_map_keys(native):
    nested = native.value_encode({"a": None})
    assert native.value_decode(nested, max_depth=2) == {"a": None}
    with pytest.raises(ValueCodecError) as caught:
        native.value_decode(nested, max_depth=1)
    assert (caught.value.reason, caught.value.offset) == ("depth_limit", 5)
    assert native.value_decode(b"\x08\x00\x00\x00\x00", max_depth=1) == []


@pytest.mark.parametrize(
    ("obj", "reason"),
    [(2**64, "integer_out_of_range"), (-(2**63) - 1, "integer_out_of_range"),
     (float("nan"), "non_finite_float"), (float("-inf"), "non_finite_float"),
     ("\ud800", "invalid_utf8"), ({1: 2}, "unsupported_type"), (object(), "unsupported_type"),
     ({1, 2}, "unsupported_type")],
)
def test_encode_errors(native, obj, reason):
    with pytest.raises(ValueCodecError) as caught:
        native.value_encode([obj])
    assert caught.value.reason == reason and caught.value.offset == 5


def test_encode_cycle_is_a_typed_error(native):
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueCodecError) as caught:
        native.value_encode(cycle)
    assert caught.value.reason == "depth_limit"


def test_encode_types(native):
    assert native.value_encode((True, b"x", bytearray(b"y"))) == (
        b"\x08\x00\x00\x00\x03\x02\x07\x00\x00\x00\x01x\x07\x00\x00\x00\x01y")
    assert native.value_encode(1.0) != native.value_encode(1)


def test_limit_arguments_refused(native):
    with pytest.raises(ValueError, match="max_depth"):
        native.value_decode(b"\x00", max_depth=-1)
    with pytest.raises(ValueError, match="max_nodes"):
        native.value_decode(b"\x00", max_nodes=-1)


# ---- text bodies: strict UTF-8 (the C check takes ASCII 32, then 8 bytes at a time, and a
# rest shorter than 8 bytes at once) -------------------------------------------------------

_PIECES = st.one_of(
    st.binary(max_size=3),  # stray bytes: continuation bytes, overlong leads, 0xF5..0xFF
    st.text(max_size=12).map(lambda text: text.encode("utf-8", "surrogatepass")),  # lone
    st.integers(0, 40).map(lambda n: b"a" * n),  # ASCII runs across the 8-byte words
    st.sampled_from([b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf", b"\xc0\xaf",
                     b"\xf0\x9f\x98", b"\xc3"]),  # surrogate, > U+10FFFF, overlong, truncated
)


def _strict(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_PIECES, max_size=10).map(b"".join))
def test_a_text_body_decodes_exactly_when_it_is_strict_utf8(native, body):
    assert_decoded_when_strict(native, body)


def assert_decoded_when_strict(native, body: bytes) -> None:
    """A text of ``body`` decodes exactly when ``body`` is strict UTF-8, and is refused at
    its start otherwise."""
    encoded = b"\x06" + len(body).to_bytes(4, "big") + body
    if _strict(body):
        assert native.value_decode(encoded) == body.decode("utf-8")
    else:
        with pytest.raises(ValueCodecError) as caught:
            native.value_decode(encoded)
        assert (caught.value.reason, caught.value.offset) == ("invalid_utf8", 0)


@pytest.mark.parametrize("piece", [b"\xc3\xa9", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80"])
def test_one_piece_at_every_place_of_an_ascii_run(native, piece):
    """Each length up to 72 (32-byte runs, 8-byte words, short rests) with one piece at
    each place: decoded exactly when the whole is strict UTF-8."""
    for length in range(73):
        for place in range(length + 1):
            assert_decoded_when_strict(native, b"a" * place + piece + b"b" * (length - place))
        body = b"c" * length
        assert native.value_decode(b"\x06" + length.to_bytes(4, "big") + body) == body.decode()
