"""``scan_record_columns``: the same walk as ``scan_records``, as columns, in both twins."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native.conftest import fixture_bytes
from tay._native import pure

F01 = fixture_bytes("storage/record/v1/f01.bin.hex")
F02 = fixture_bytes("storage/record/v1/f02.bin.hex")
BUDGET = 16_777_216


def as_rows(columns: tuple, first_sequence: int) -> tuple:
    offsets, types, schemas, lengths, stop_offset, stop = columns
    assert isinstance(offsets, array) and offsets.typecode == "Q"
    assert isinstance(lengths, array) and lengths.typecode == "I"
    assert isinstance(types, bytes) and isinstance(schemas, bytes)
    assert len(offsets) == len(types) == len(schemas) == len(lengths)
    rows = [(o, t, s, first_sequence + i, n)
            for i, (o, t, s, n) in enumerate(zip(offsets, types, schemas, lengths))]
    return rows, stop_offset, stop


def test_columns_of_fixture_stream(native):
    stream = F01 + F02 + b"TAYF"
    rows = as_rows(native.scan_record_columns(stream, 0, len(stream), BUDGET, 1), 1)
    assert rows == ([(0, 1, 1, 1, 0), (28, 1, 1, 2, 9)], 65, "not_record")


def test_columns_refuse_bad_bounds(native):
    with pytest.raises(ValueError, match="scan range"):
        native.scan_record_columns(F01, 0, len(F01) + 1, BUDGET, 1)


frames = st.lists(st.tuples(st.integers(1, 254), st.integers(1, 255), st.binary(max_size=50)),
                  max_size=10)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the twin is stateless
@given(frames, st.integers(1, 2**40), st.binary(max_size=12), st.data())
def test_columns_equal_scan_records_in_both_twins(native, batch, first, tail, data):
    stream = pure.encode_records([(t, s, first + i, p) for i, (t, s, p) in enumerate(batch)])
    stream = bytearray(stream + tail)
    if stream and data.draw(st.booleans()):
        stream[data.draw(st.integers(0, len(stream) - 1))] ^= 0x20
    stream = bytes(stream)
    start = data.draw(st.sampled_from([0] + [28] * (len(stream) >= 28)))
    end = data.draw(st.integers(start, len(stream)))
    budget = data.draw(st.sampled_from([BUDGET, 20]))
    expected = pure.scan_records(stream, start, end, budget, first)
    assert as_rows(native.scan_record_columns(stream, start, end, budget, first), first) \
        == expected
