"""Record v1: every upstream fixture with its exact outcome, the precedence, the encoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats.record import (
    MAX_PAYLOAD,
    MAX_SEQUENCE,
    decode_record,
    decode_stream,
    encode_record,
    encode_records,
)
from tay.storage.formats.value import EncodeError

VALID = {
    "f01": (1, 1, 1, b""),
    "f02": (1, 1, 2, bytes.fromhex("00ff544159007f800a")),
    "f03": (254, 255, MAX_SEQUENCE, b""),
    "f07": (2, 1, 1, b""),
    "f09": (1, 2, 1, b""),
    "f18": (1, 1, 3, b""),
}

# fixture -> (category, reason, fields that must be in err.extra)
REFUSED = {
    "f04": ("corrupt", "header_checksum", {}),
    "f05": ("corrupt", "record_checksum", {}),
    "f06": ("unsupported", "format", {"version": 2}),
    "f08": ("unsupported", "flags", {"flags": 1}),
    "f10": (
        "incomplete",
        "incomplete_payload",
        {"record_bytes": 16_777_244, "available": 24, "missing": 16_777_220,
         "type": 254, "schema": 255, "sequence": MAX_SEQUENCE, "length": 16_777_216},
    ),
    "f11": ("corrupt", "payload_length_exceeds_format",
            {"length": 4_294_967_295, "limit": 16_777_216}),
    "f12": ("corrupt", "payload_length_exceeds_format",
            {"length": 16_777_217, "limit": 16_777_216}),
}

KIND = {"corrupt": "physical_corruption", "unsupported": "unsupported_physical",
        "incomplete": "incomplete_tail", "resource_limit": "resource_limit"}


def field(err: RecoveryRefused, name: str):
    """A fact of the refusal; ``sequence`` is a location field of its own."""
    return err.sequence if name == "sequence" else err.extra[name]


def refusal(buf: bytes, offset: int = 0, budget: int = MAX_PAYLOAD) -> RecoveryRefused:
    with pytest.raises(RecoveryRefused) as info:
        decode_record(buf, offset, budget)
    return info.value


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_fixture_decodes(upstream, name):
    buf = upstream.record(name)
    record = decode_record(buf)
    assert (record.type, record.schema, record.sequence, record.payload) == VALID[name]
    assert (record.offset, record.end) == (0, len(buf))


def test_f01_carries_both_crcs_equal(upstream):
    buf = upstream.record("f01")
    assert buf[20:24] == buf[24:28] == bytes.fromhex("44ea307b")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_fixture_has_exact_class(upstream, name):
    category, reason, fields = REFUSED[name]
    err = refusal(upstream.record(name))
    assert (err.extra["category"], err.reason, err.kind) == (category, reason, KIND[category])
    assert {key: field(err, key) for key in fields} == fields
    assert err.offset == 0


def test_budget_8_is_resource_limit_and_9_is_ok(upstream):
    buf = upstream.record("f02")
    err = refusal(buf, budget=8)
    assert (err.kind, err.reason, err.extra["length"], err.extra["limit"]) == (
        "resource_limit", "resource_limit", 9, 8)
    assert decode_record(buf, budget=9).payload == VALID["f02"][3]


def test_resource_limit_wins_over_incomplete_payload(upstream):
    err = refusal(upstream.record("f10"), budget=MAX_PAYLOAD - 1)
    assert err.reason == "resource_limit"


def test_damaged_middle_record_keeps_remainder(upstream):
    f01, f02, f18 = (upstream.record(n) for n in ("f01", "f02", "f18"))
    damaged = bytearray(f02)
    damaged[19] ^= 0x40
    stream = f01 + bytes(damaged) + f18
    first = decode_record(stream)
    assert first.sequence == 1
    remainder = stream[first.end:]
    assert remainder == bytes(damaged) + f18
    err = refusal(remainder)
    assert err.reason == "header_checksum"
    with pytest.raises(RecoveryRefused) as info:
        decode_stream(stream)
    assert (info.value.reason, info.value.offset) == ("header_checksum", len(f01))


def test_contiguous_stream_f01_f02_f18(upstream):
    stream = b"".join(upstream.record(n) for n in ("f01", "f02", "f18"))
    assert [r.sequence for r in decode_stream(stream)] == [1, 2, 3]


def test_magic_inside_payload_is_not_a_boundary(upstream):
    assert b"TAY\x00" in upstream.record("f02")[24:-4]
    assert len(decode_stream(upstream.record("f02"))) == 1


def _header(version=1, rtype=1, flags=0, schema=1, sequence=1, length=0) -> bytes:
    fields = struct.pack(">4sBBBBQI", b"TAY\x00", version, rtype, flags, schema, sequence, length)
    return fields + struct.pack(">I", _native.crc32c(fields))


@pytest.mark.parametrize(
    "header_args, reason, name, value",
    [
        ({"version": 0}, "invalid_format", "version", 0),
        ({"rtype": 0}, "reserved_type", "type", 0),
        ({"rtype": 255}, "reserved_type", "type", 255),
        ({"schema": 0}, "invalid_schema", "schema", 0),
        ({"sequence": 0}, "invalid_sequence", "sequence", 0),
    ],
)
def test_header_domain_refusals(header_args, reason, name, value):
    err = refusal(_header(**header_args) + b"\0\0\0\0")
    assert err.extra["category"] == "corrupt"
    assert err.reason == reason and field(err, name) == value


def test_flags_are_checked_before_type_and_schema():
    err = refusal(_header(flags=4, rtype=0, schema=0))
    assert (err.reason, err.extra["flags"]) == ("flags", 4)


def test_version_is_checked_before_the_header_is_complete():
    assert refusal(b"TAY\x00\x00").reason == "invalid_format"
    assert refusal(b"TAY\x00\x07").reason == "format"


@pytest.mark.parametrize("prefix", [b"", b"T", b"TA", b"TAY", b"TAY\x00", b"TAY\x00\x01"])
def test_short_magic_prefix_is_incomplete_header(prefix):
    err = refusal(prefix)
    assert (err.extra["category"], err.reason) == ("incomplete", "incomplete_header")


@pytest.mark.parametrize("prefix", [b"X", b"TB", b"TAX", b"TAYF", b"\x00\x00\x00\x00\x01"])
def test_wrong_magic_prefix_is_invalid_magic(prefix):
    assert refusal(prefix).reason == "invalid_magic"


def test_header_length_is_not_trusted_before_header_crc(upstream):
    buf = bytearray(upstream.record("f01"))
    buf[16:20] = b"\xff\xff\xff\xff"  # would be payload_length_exceeds_format if trusted
    assert refusal(bytes(buf)).reason == "header_checksum"


def test_empty_payload_with_24_bytes_is_incomplete_checksum(upstream):
    err = refusal(upstream.record("f01")[:24])
    assert (err.reason, err.extra["missing"], err.extra["record_bytes"]) == (
        "incomplete_checksum", 4, 28)


def test_partial_checksum_and_partial_payload(upstream):
    f02 = upstream.record("f02")  # 37 bytes, payload 9
    assert refusal(f02[:33]).reason == "incomplete_checksum"
    assert refusal(f02[:32]).reason == "incomplete_payload"
    assert refusal(f02[:30]).extra["missing"] == 7


def test_decode_at_an_offset(upstream):
    stream = upstream.record("f01") + upstream.record("f02")
    record = decode_record(stream, 28)
    assert (record.sequence, record.offset, record.end) == (2, 28, len(stream))


@pytest.mark.parametrize("name", sorted(VALID))
def test_encoder_reproduces_valid_fixture(upstream, name):
    assert encode_record(*VALID[name]) == upstream.record(name)


def test_encode_records_concatenates(upstream):
    frames = encode_records([VALID["f01"], VALID["f02"], VALID["f18"]])
    assert frames == b"".join(upstream.record(n) for n in ("f01", "f02", "f18"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rtype": 0}, {"rtype": 255}, {"schema": 0}, {"schema": 256}, {"sequence": 0},
        {"sequence": MAX_SEQUENCE + 1}, {"version": 2}, {"flags": 1},
        {"payload": bytes(MAX_PAYLOAD + 1)},
    ],
)
def test_encoder_refuses_domain_violations(kwargs):
    args = {"rtype": 1, "schema": 1, "sequence": 1, "payload": b""} | kwargs
    with pytest.raises(EncodeError) as info:
        encode_record(args.pop("rtype"), args.pop("schema"), args.pop("sequence"),
                      args.pop("payload"), **args)
    assert info.value.reason == "invalid_record"


def test_budget_argument_is_validated(upstream):
    with pytest.raises(ValueError):
        decode_record(upstream.record("f01"), budget=MAX_PAYLOAD + 1)


records_strategy = st.lists(
    st.tuples(
        st.integers(1, 254), st.integers(1, 255), st.integers(1, MAX_SEQUENCE),
        st.binary(max_size=64),
    ),
    min_size=1, max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(records_strategy)
def test_round_trip(records):
    decoded = decode_stream(encode_records(records))
    assert [(r.type, r.schema, r.sequence, r.payload) for r in decoded] == records


@settings(max_examples=100, deadline=None)
@given(records_strategy, st.data())
def test_any_prefix_gives_the_valid_prefix_then_incomplete(records, data):
    stream = encode_records(records)
    cut = data.draw(st.integers(0, len(stream) - 1))
    prefix = stream[:cut]
    offset, seen = 0, []
    while True:
        try:
            record = decode_record(prefix, offset)
        except RecoveryRefused as err:
            if offset == len(prefix):
                break
            assert err.extra["category"] == "incomplete", err.report()
            break
        seen.append((record.type, record.schema, record.sequence, record.payload))
        offset = record.end
    assert seen == records[: len(seen)]
    assert len(seen) < len(records)


@settings(max_examples=200, deadline=None)
@given(records_strategy, st.data())
def test_flipped_byte_never_yields_a_wrong_record(records, data):
    stream = bytearray(encode_records(records))
    position = data.draw(st.integers(0, len(stream) - 1))
    stream[position] ^= data.draw(st.integers(1, 255))
    decoded = []
    try:
        decoded = decode_stream(bytes(stream))
    except RecoveryRefused:
        pass
    else:  # only possible if a CRC collides: then every record must be unchanged
        assert [(r.type, r.schema, r.sequence, r.payload) for r in decoded] == records
    # whatever decoded before the refusal is an exact prefix of the truth
    offset, good = 0, []
    while offset < len(stream):
        try:
            record = decode_record(bytes(stream), offset)
        except RecoveryRefused:
            break
        good.append((record.type, record.schema, record.sequence, record.payload))
        offset = record.end
    assert good == records[: len(good)]
