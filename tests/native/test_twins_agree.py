"""Property tests: the C twin equals the pure twin on arbitrary input, and round trips hold."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay._native import pure
from tay._native.errors import ValueCodecError
from tests.build_guard import c_twin

c = c_twin()

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text() | st.binary(max_size=40))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=30,
)
records = st.lists(
    st.tuples(st.integers(1, 254), st.integers(1, 255), st.binary(max_size=64)), max_size=8)


def decode_outcome(module, data, **limits):
    try:
        return ("ok", repr(module.value_decode(data, **limits)))
    except ValueCodecError as exc:
        return ("error", exc.reason, exc.offset)


@SETTINGS
@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_crc_agrees(data, seed):
    assert c.crc32c(data, seed) == pure.crc32c(data, seed)
    cut = len(data) // 3
    assert c.crc32c(data[cut:], c.crc32c(data[:cut])) == c.crc32c(data)


@SETTINGS
@given(values)
def test_value_round_trip(value):
    encoded = pure.value_encode(value)
    assert c.value_encode(value) == encoded
    assert repr(c.value_decode(encoded)) == repr(pure.value_decode(encoded))
    assert pure.value_encode(c.value_decode(encoded)) == encoded


@SETTINGS
@given(st.binary(max_size=60))
def test_decode_arbitrary_bytes_agree(data):
    assert decode_outcome(c, data) == decode_outcome(pure, data)


@SETTINGS
@given(values, st.data())
def test_decode_mutated_values_agree(value, data):
    encoded = bytearray(pure.value_encode(value))
    index = data.draw(st.integers(0, len(encoded) - 1))
    encoded[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    limits = {"max_depth": data.draw(st.integers(0, 6)), "max_nodes": data.draw(st.integers(0, 40)),
              "max_binary": data.draw(st.integers(0, 200))}
    mutated = bytes(encoded[:cut])
    assert decode_outcome(c, mutated, **limits) == decode_outcome(pure, mutated, **limits)


@SETTINGS
@given(records, st.integers(1, 2**64 - 20))
def test_record_batches_agree(batch, first):
    tuples = [(t, s, first + i, p) for i, (t, s, p) in enumerate(batch)]
    encoded = c.encode_records(tuples)
    assert encoded == pure.encode_records(tuples)
    scanned = c.scan_records(encoded, 0, len(encoded), 16_777_216, first)
    assert scanned == pure.scan_records(encoded, 0, len(encoded), 16_777_216, first)
    assert scanned[2] == "end" and [r[3] for r in scanned[0]] == [t[2] for t in tuples]


@SETTINGS
@given(records.filter(bool), st.data())
def test_flipped_byte_never_yields_a_wrong_record(batch, data):
    tuples = [(t, s, 1 + i, p) for i, (t, s, p) in enumerate(batch)]
    encoded = c.encode_records(tuples)
    index = data.draw(st.integers(0, len(encoded) - 1))
    flip = data.draw(st.integers(1, 255))
    corrupted = bytearray(encoded)
    corrupted[index] ^= flip
    result = c.scan_records(corrupted, 0, len(corrupted), 16_777_216, 1)
    assert result == pure.scan_records(corrupted, 0, len(corrupted), 16_777_216, 1)
    found, stop, code = result
    good = pure.scan_records(encoded, 0, len(encoded), 16_777_216, 1)[0]
    assert found == good[: len(found)]  # every record reported is one that was written
    assert code != "end" and stop <= index


@SETTINGS
@given(st.binary(max_size=80), st.integers(0, 20))
def test_split_frames_agree(data, max_frame):
    assert c.split_frames(data, max_frame) == pure.split_frames(data, max_frame)


@SETTINGS
@given(st.lists(st.binary(min_size=1, max_size=20), max_size=6), st.binary(max_size=6))
def test_split_frames_finds_written_frames(payloads, tail):
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads) + tail
    frames, consumed, error = c.split_frames(buf, 20)
    assert [buf[s:e] for s, e in frames][: len(payloads)] == payloads
    assert (frames, consumed, error) == pure.split_frames(buf, 20)
