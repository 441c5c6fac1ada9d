"""JSON <-> canonical Value transcoders: C == pure == the existing encoder/decoder + orjson."""

from __future__ import annotations

import json
import struct

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tay._native import pure
from tay._native._pure_value import value_decode, value_encode
from tay._native.errors import ValueCodecError
from tests.build_guard import c_twin

c = c_twin()

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.just(-0.0) | st.text())
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=30,
)
TWINS = [pure, c]


def outcome(function, data):
    try:
        return ("ok", function(data))
    except ValueCodecError as exc:
        return ("error", exc.reason, exc.offset)


def spellings(obj) -> list[bytes]:
    """The same document as orjson, sorted orjson, ASCII-escaped and indented stdlib JSON."""
    return [orjson.dumps(obj), orjson.dumps(obj, option=orjson.OPT_SORT_KEYS),
            json.dumps(obj).encode(), json.dumps(obj, indent=1, ensure_ascii=False).encode()]


@SETTINGS
@given(json_values)
def test_json_to_value_equals_the_object_encoder(obj):
    expected = value_encode(obj)
    for text in spellings(obj):
        for twin in TWINS:
            assert twin.json_to_value(text) == expected


@SETTINGS
@given(json_values)
def test_value_to_json_is_orjson_of_the_decoded_value(obj):
    encoded = value_encode(obj)
    expected = orjson.dumps(value_decode(encoded))
    for twin in TWINS:
        assert twin.value_to_json(encoded, 256) == expected


POWERS_OF_TWO = [2.0**k for k in range(-1074, 1024, 7)]
EDGE_FLOATS = [0.0, -0.0, 1.0, 1e15, 1e16, 1e-5, 1e-6, 1.5e-5, 2.5e-6, 5e-324, 2.2250738585072014e-308,
               1.7976931348623157e308, 0.1, 123456789012345680.0, 9007199254740993.0, 1e21, 1e22]


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
@example(5e-324)
def test_floats_print_exactly_as_orjson(real):
    for value in (real, -real):
        encoded = value_encode([value])
        for twin in TWINS:
            assert twin.value_to_json(encoded) == orjson.dumps([value])


def test_edge_floats_and_powers_of_two_print_as_orjson():
    reals = EDGE_FLOATS + POWERS_OF_TWO + [-x for x in EDGE_FLOATS + POWERS_OF_TWO]
    encoded = value_encode(reals)
    assert c.value_to_json(encoded) == pure.value_to_json(encoded) == orjson.dumps(reals)
    assert c.json_to_value(orjson.dumps(reals)) == encoded


@SETTINGS
@given(st.binary(max_size=60))
def test_twins_agree_on_arbitrary_json_bytes(data):
    assert outcome(c.json_to_value, data) == outcome(pure.json_to_value, data)


json_alphabet = st.sampled_from(list(b'{}[]",:\\/ -+.eE0129tfnrulab') + [0x00, 0x0A, 0xC3, 0xA9, 0xED, 0xFF])


@settings(max_examples=300, deadline=None)
@given(json_values, st.lists(st.tuples(st.integers(0, 10**6), json_alphabet), min_size=1, max_size=3))
def test_twins_agree_on_mutated_json(obj, edits):
    data = bytearray(orjson.dumps(obj))
    for position, byte in edits:
        data.insert(position % (len(data) + 1), byte)
    assert outcome(c.json_to_value, bytes(data)) == outcome(pure.json_to_value, bytes(data))


# bytes around every class the C string scan tests a word at a time: stops ('"', '\\',
# controls), plain ASCII, and high bytes that are (or are not) valid UTF-8 sequences
string_bytes = st.sampled_from([0x22, 0x5C, 0x00, 0x1F, 0x20, 0x7F, 0x41, 0x6E, 0x75,
                                0x80, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xED, 0xA0, 0xF0, 0xFF])


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 40), st.lists(string_bytes, max_size=40), st.integers(0, 40))
def test_twins_agree_on_strings_across_word_boundaries(plain, tail, more):
    """A string whose stops, escapes and non-ASCII bytes fall at any offset of an 8-byte
    word or a 16-byte block: the scan finds the same end and the same refusal as the twin."""
    body = b"x" * plain + bytes(tail) + b"y" * more
    for data in (b'"' + body + b'"', b'{"k":"' + body + b'"}', b'["' + body):
        assert outcome(c.json_to_value, data) == outcome(pure.json_to_value, data)


@pytest.mark.parametrize("special", [b'"', b"\\n", b"\x00", b"\x1f", b"\xc3\xa9", b"\xff"],
                         ids=["quote", "escape", "nul", "control", "utf8", "bad-utf8"])
def test_one_special_byte_at_every_offset_of_a_block(special):
    """The C scan tests 16 bytes at a time while 16 are left, then 8, then one: one special
    byte (stop, escape, valid or invalid UTF-8) at every offset of the first three blocks,
    in strings that end well before, right at and after the input's last 16 bytes."""
    for offset in range(48):
        for after in (0, 7, 15, 16, 40):
            body = b"a" * offset + special + b"b" * after
            for data in (b'["' + body + b'", 1]' + b" " * 20, b'"' + body + b'"'):
                expected = outcome(pure.json_to_value, data)
                assert outcome(c.json_to_value, data) == expected, (offset, after, data)


@SETTINGS
@given(st.binary(max_size=80))
def test_value_to_json_refuses_as_the_decoder(data):
    results = {twin.IMPLEMENTATION: outcome(lambda b: twin.value_to_json(b, 256), data) for twin in TWINS}
    assert results["c"] == results["python"]
    decoded = outcome(lambda b: repr(value_decode(b, 256)), data)
    if decoded[0] == "error":
        assert results["c"] == decoded


@pytest.mark.parametrize("twin", TWINS, ids=["pure", "c"])
@pytest.mark.parametrize("text, reason, offset", [
    (b'{"a":1,"b":2,"a":3}', "duplicate_key", 13),
    (b'{"b":1,"a":2,"b":3}', "duplicate_key", 13),
    (b'{"a":1,"a":2}', "duplicate_key", 7),
    (b'["\\ud800"]', "invalid_utf8", 1),
    (b'["\\udc00\\ud800"]', "invalid_utf8", 1),
    (b'["ok","\\ud83d x"]', "invalid_utf8", 6),
    (b'"\xed\xa0\x80"', "invalid_utf8", 0),
    (b'"\xc0\xaf"', "invalid_utf8", 0),
    (b'[18446744073709551616]', "integer_out_of_range", 1),
    (b'[-9223372036854775809]', "integer_out_of_range", 1),
    (b'{"x":1e400}', "non_finite_float", 5),
    (b'[NaN]', "malformed_json", 1),
    (b'[1,]', "malformed_json", 3),
    (b'{"a" 1}', "malformed_json", 5),
    (b'[01]', "malformed_json", 2),
    (b'"a\nb"', "malformed_json", 2),
    (b'"\\x"', "malformed_json", 2),
    (b'[1] x', "malformed_json", 4),
    (b'', "malformed_json", 0),
    (b'[' * 256 + b']' * 256, "depth_limit", 255),
])
def test_refusals_name_reason_and_input_offset(twin, text, reason, offset):
    with pytest.raises(ValueCodecError) as info:
        twin.json_to_value(text)
    assert (info.value.reason, info.value.offset) == (reason, offset)


@pytest.mark.parametrize("twin", TWINS, ids=["pure", "c"])
def test_boundaries_encode_like_the_object_encoder(twin):
    nested = [[]]
    for _ in range(253):
        nested = [nested]  # 255 levels of lists: the deepest the object encoder takes
    assert twin.json_to_value(json.dumps(nested).encode()) == value_encode(nested)  # orjson stops at 254
    for text, obj in [(b"-0", 0), (b"-0.0", -0.0), (b"1.0", 1.0), (b"1E2", 100.0),
                      (b"-9223372036854775808", -(2**63)), (b"18446744073709551615", 2**64 - 1),
                      (b'"\\u0000\\/\\b"', "\x00/\b"), (b' {"\xc3\xa9":1,"z":2} ', {"z": 2, "é": 1})]:
        assert twin.json_to_value(text) == value_encode(obj)
    assert twin.json_to_value(b"1.0")[0] == 0x05 and twin.json_to_value(b"1")[0] == 0x04


@pytest.mark.parametrize("twin", TWINS, ids=["pure", "c"])
def test_value_to_json_refuses_bytes_after_validating_everything(twin):
    with pytest.raises(ValueCodecError) as info:
        twin.value_to_json(value_encode([1, b"raw", b"more"]))
    assert (info.value.reason, info.value.offset) == ("unsupported_type", 14)
    invalid = value_encode([b"raw"]) + b"\x00"  # the trailing byte is found first
    with pytest.raises(ValueCodecError) as info:
        twin.value_to_json(invalid)
    assert info.value.reason == "trailing_bytes"


@pytest.mark.parametrize("twin", TWINS, ids=["pure", "c"])
def test_large_documents_grow_their_output_buffer(twin):
    numbers = list(range(5000))  # 9 bytes of Value per 1-5 bytes of JSON
    assert twin.json_to_value(orjson.dumps(numbers)) == value_encode(numbers)
    flags = [False] * 5000  # "false," per byte of Value
    assert twin.value_to_json(value_encode(flags)) == orjson.dumps(flags)
    controls = "\x01" * 3000  # six bytes of JSON per byte of text
    assert twin.value_to_json(value_encode(controls)) == orjson.dumps(controls)


def test_value_to_json_honours_decode_limits():
    deep = value_encode([[[1]]])
    for twin in TWINS:
        with pytest.raises(ValueCodecError) as info:
            twin.value_to_json(deep, max_depth=3)
        assert info.value.reason == "depth_limit"
        assert twin.value_to_json(memoryview(deep), max_depth=4) == b"[[[1]]]"
    assert struct.unpack(">d", c.json_to_value(b"-0.0")[1:])[0] == 0.0


def measured_outcome(function, data):
    try:
        return ("ok", function(data))
    except ValueCodecError as exc:
        return ("error", exc.reason, exc.offset)


@SETTINGS
@given(json_values)
def test_measured_transcoding_counts_as_the_decoded_value(obj):
    from tay.engine.validation.values import measure

    size = measure(obj, "obj")
    for text in spellings(obj):
        for twin in TWINS:
            encoded, depth, nodes = twin.json_to_value_measured(text)
            assert encoded == value_encode(obj)
            assert (len(encoded), depth, nodes) == size


@SETTINGS
@given(st.binary(max_size=60) | json_values.map(orjson.dumps))
def test_measured_transcoding_refuses_as_the_plain_one(data):
    for twin in TWINS:
        plain = measured_outcome(twin.json_to_value, data)
        measured = measured_outcome(twin.json_to_value_measured, data)
        if plain[0] == "ok":
            assert measured[0] == "ok" and measured[1][0] == plain[1]
        else:
            assert measured == plain
    assert measured_outcome(c.json_to_value_measured, data) \
        == measured_outcome(pure.json_to_value_measured, data)


@pytest.mark.parametrize("twin", TWINS, ids=["pure", "c"])
def test_large_measured_documents_grow_their_output_buffer(twin):
    numbers = list(range(5000))
    assert twin.json_to_value_measured(orjson.dumps(numbers)) == (value_encode(numbers), 2, 5001)
