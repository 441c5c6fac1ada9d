"""RecordTable: columns that read like the list of record tuples they replace."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.storage.formats.record_table import RecordTable

rows = st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 254), st.integers(1, 255),
                          st.integers(0, 16_777_216)), max_size=30)


def table_of(first: int, parts: list[list[tuple]]) -> tuple[RecordTable, list[tuple]]:
    table = RecordTable(first)
    expected = []
    for part in parts:
        table.extend(array("Q", [r[0] for r in part]), bytes(r[1] for r in part),
                     bytes(r[2] for r in part), array("I", [r[3] for r in part]))
        for offset, rtype, schema, length in part:
            expected.append((offset, rtype, schema, first + len(expected), length))
    return table, expected


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, max_size=4), st.integers(1, 2**63), st.integers(0, 40),
       st.integers(0, 40))
def test_table_reads_like_the_tuple_list(parts, first, start, stop):
    table, expected = table_of(first, parts)
    assert len(table) == len(expected)
    assert list(table) == expected and table == expected
    assert list(table.batch(start, stop)) == expected[start:stop]
    assert table[start:stop] == expected[start:stop]
    if expected:
        assert table[-1] == expected[-1] and table[0] == expected[0]


def test_index_out_of_range_is_an_index_error():
    table, _ = table_of(5, [[(44, 1, 1, 10)]])
    assert table[0] == (44, 1, 1, 5, 10)
    with pytest.raises(IndexError):
        table[1]
    with pytest.raises(IndexError):
        table[-2]
