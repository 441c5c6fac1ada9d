"""``json_member_count``: the colons outside strings of a JSON text equal the members of its
objects (the decoder's duplicate-key check rests on this), and the C and pure twins agree."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay._native import pure
from tests.build_guard import c_twin
from tests.storage.json_strategies import SETTINGS, json_values

c = c_twin()

# keys and strings full of the characters the scanner must see through
tricky_text = st.text(alphabet=st.sampled_from(':"\\{}[],x \u2028\u00e9\U0001f600'), max_size=8)
tricky_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=20)


def members(value) -> int:
    if isinstance(value, dict):
        return len(value) + sum(members(v) for v in value.values())
    if isinstance(value, list):
        return sum(members(v) for v in value)
    return 0


@SETTINGS
@given(json_values | tricky_values, st.booleans(), st.sampled_from([None, 1, "\t"]))
def test_member_count_of_any_json_text(value, ascii_only, indent):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent,
                      separators=None if indent else (",", ":")).encode("utf-8", "surrogatepass")
    assert c.json_member_count(text) == pure.json_member_count(text) == members(value)


@SETTINGS
@given(st.binary(max_size=200))
def test_twins_agree_on_any_bytes(data):
    assert c.json_member_count(data) == pure.json_member_count(data)


def test_escaped_quotes_and_backslashes_do_not_end_a_string():
    for twin in (c, pure):
        assert twin.json_member_count(rb'{"a\"":"\\","b":"\\\":"}') == 2
        assert twin.json_member_count(b'{"k":"\xff:"}') == 1
        assert twin.json_member_count(b'["unterminated :') == 0
