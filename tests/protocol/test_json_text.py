"""``surely_exact``: when it vouches for a JSON text, orjson's reading of it is the exact one
(no repeated key, no integer beyond 64 bits), so readers may skip their own checks."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay.protocol import json_text
from tay.protocol.json_text import surely_exact
from tests.storage.json_strategies import SETTINGS, json_values


def exact(text: bytes):
    def refuse_repeats(pairs):
        if len({key for key, _ in pairs}) != len(pairs):
            raise ValueError("repeated key")
        return dict(pairs)
    return json.loads(text, object_pairs_hook=refuse_repeats)


@SETTINGS
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_a_vouched_text_reads_the_same_with_orjson_and_exactly(value):
    text = json.dumps(value, separators=(",", ":")).encode()
    if surely_exact(text):
        assert orjson.loads(text) == exact(text)


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}',
    b'{"a":{"b":1,"b":1}}',
    b'{"a":12345678901234567890}',
    b'{"a":[-1234567890123456789]}',
])
def test_repeated_keys_and_long_integers_are_never_vouched_for(text):
    assert not surely_exact(text)


def test_plain_replies_are_vouched_for_with_the_c_scan():
    from tay import _native

    text = b'{"version":1,"type":"enqueued","request_id":"r-1","job":{"id":"j","args":{"n":"12345678901234567890"}}}'
    assert surely_exact(text) is (_native.IMPLEMENTATION == "c")


def test_without_the_c_twin_nothing_is_vouched_for(monkeypatch):
    from tay import _native

    monkeypatch.setattr(_native, "IMPLEMENTATION", "python")
    monkeypatch.setattr(json_text, "_surely_exact", json_text._resolve)
    assert not surely_exact(b'{"a":1}')
    monkeypatch.undo()
    json_text._surely_exact = json_text._resolve  # the next caller picks the scan again
