"""``measure``: the path-free fast walk agrees with the real encoder and with the located
walk, and refusals still name where the problem is."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from tay.engine.validation.values import UnsupportedValue, _measure_located, measure
from tay.storage.formats import value

INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)
SCALARS = st.none() | st.booleans() | INT | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=20)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=25)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_fast_measure_matches_the_encoder_and_the_located_walk(obj) -> None:
    size = measure(obj, "args")
    assert size == _measure_located(obj, "args")
    assert size.encoded_bytes == len(value.encode(obj))


@pytest.mark.parametrize(("obj", "where"), [
    ({"a": [1, {"b": math.nan}]}, "args.a[1].b"),
    ({"a": {"deep": 2**64}}, "args.a.deep"),
    ({"a": [b"bytes"]}, "args.a[0]"),
    ({"a": {1: "x"}}, "args.a"),
    ({"s": "lone \\ud800 surrogate".encode().decode("unicode_escape")}, "args.s"),
    ({"é": {"k": float("inf")}}, "args.é.k"),
])
def test_refusals_name_the_path(obj, where: str) -> None:
    with pytest.raises(UnsupportedValue) as refused:
        measure(obj, "args")
    assert refused.value.where == where


def test_non_ascii_text_is_sized_in_utf8_bytes() -> None:
    assert measure("é€😀", "x").encoded_bytes == 5 + len("é€😀".encode())
    assert measure({"ключ": "значение"}, "x").encoded_bytes == len(value.encode({"ключ": "значение"}))


ODD = st.sampled_from([math.nan, math.inf, 2**64, -(2**63) - 1, b"x", (1,), {1, 2},
                       "\ud800"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), SCALARS | ODD | st.lists(SCALARS, max_size=2)
                       | st.dictionaries(st.text(max_size=3), SCALARS, max_size=2),
                       max_size=6))
def test_a_map_of_scalars_measures_as_the_located_walk(obj) -> None:
    """The one-loop walk of a flat map (most args) gives the general walk's figures and,
    on anything it cannot size, the same refusal naming the same place."""
    try:
        expected = _measure_located(obj, "args")
    except UnsupportedValue as refused:
        with pytest.raises(UnsupportedValue) as again:
            measure(obj, "args")
        assert (again.value.where, again.value.problem) == (refused.where, refused.problem)
        return
    assert measure(obj, "args") == expected
    assert expected.encoded_bytes == len(value.encode(obj))
