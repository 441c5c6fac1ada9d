"""Definitions built from args JSON, and args read back as JSON (the native transcoders)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay.failures import RecoveryRefused
from tay.storage.formats import value
from tay.storage.events.definition import (
    LazyDefinition, PayloadRefused, args_json, build_definition, live_definition,
)
from tests.storage.json_strategies import SETTINGS, json_values

args_maps = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
FIELDS = dict(worker_key="bench.task", queue_key="alpha", max_attempts=3, scheduled_at=None,
              timeout_ms=30_000)


@SETTINGS
@given(args_maps, st.none() | st.integers(0, 2**63 - 1))
def test_from_args_json_writes_the_object_encoders_bytes(args, scheduled_at):
    fields = {**FIELDS, "scheduled_at": scheduled_at}
    plain = build_definition(args=args, **fields)
    lazy = LazyDefinition.from_args_json(orjson.dumps(args), 7, **fields)
    assert lazy.canonical == value.encode(plain)
    assert dict(lazy) == plain and lazy.args_nodes == 7
    assert lazy.args_json() == args_json(plain) == orjson.dumps(value.decode(value.encode(args)))


def test_from_args_json_checks_the_scalars_and_the_args():
    with pytest.raises(PayloadRefused, match="queue_key"):
        LazyDefinition.from_args_json(b"{}", 1, **{**FIELDS, "queue_key": ""})
    with pytest.raises(PayloadRefused, match="args must be a map"):
        LazyDefinition.from_args_json(b"[1]", 2, **FIELDS)
    with pytest.raises(value.EncodeError) as info:
        LazyDefinition.from_args_json(b'{"a":1,"a":2}', 3, **FIELDS)
    assert info.value.reason == "duplicate_key" and "offset 7" in str(info.value)


@SETTINGS
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["alpha", "béta"]),
                          st.none() | st.integers(0, 3), st.sampled_from([1, 30_000]),
                          st.sampled_from(["t.v1", "ü.v2"])), min_size=1, max_size=12))
def test_definitions_that_share_their_scalars_share_the_stored_suffix(kinds):
    """The bytes after args are remembered per scalar set: a second definition of a kind
    is byte-identical to the object encoder's, whatever came before it."""
    for max_attempts, queue, scheduled_at, timeout_ms, worker in kinds:
        fields = dict(worker_key=worker, queue_key=queue, max_attempts=max_attempts,
                      scheduled_at=scheduled_at, timeout_ms=timeout_ms)
        lazy = LazyDefinition.from_args_json(b'{"n":1}', 2, **fields)
        assert lazy.canonical == value.encode(build_definition(args={"n": 1}, **fields))


def test_a_remembered_suffix_never_lets_bad_scalars_through():
    LazyDefinition.from_args_json(b"{}", 1, **FIELDS)  # (3, "alpha", None, 30000, ...) known
    with pytest.raises(PayloadRefused, match="max_attempts"):
        LazyDefinition.from_args_json(b"{}", 1, **{**FIELDS, "max_attempts": 3.0})
    LazyDefinition.from_args_json(b"{}", 1, **{**FIELDS, "max_attempts": 1})
    with pytest.raises(PayloadRefused, match="max_attempts"):
        LazyDefinition.from_args_json(b"{}", 1, **{**FIELDS, "max_attempts": True})
    with pytest.raises(PayloadRefused, match="timeout_ms"):
        LazyDefinition.from_args_json(b"{}", 1, **{**FIELDS, "timeout_ms": 30_000.0})
    # the same through the positional builder, each after its kind (same scalars, same
    # args size) is known: the one lookup that gives the shared scalars and the suffix
    known = live_definition(value.encode_json(b"{}"), 1, "bench.task", "alpha", 2, 5, 30_000)
    assert known.scalars[:5] == (2, "alpha", 5, 30_000, "bench.task")
    for max_attempts, scheduled_at, timeout_ms, field in (
            (2.0, 5, 30_000, "max_attempts"), (2, 5.0, 30_000, "scheduled_at"),
            (2, 5, 30_000.0, "timeout_ms")):
        with pytest.raises(PayloadRefused, match=field):
            live_definition(value.encode_json(b"{}"), 1, "bench.task", "alpha", max_attempts,
                            scheduled_at, timeout_ms)
    again = live_definition(value.encode_json(b"{}"), 1, "bench.task", "alpha", 2, 5, 30_000)
    assert again.scalars is known.scalars and again.canonical == known.canonical


def test_to_json_refuses_like_decode():
    with pytest.raises(value.EncodeError) as info:
        value.to_json(value.encode({"raw": b"\x01"}))
    assert info.value.reason == "unsupported_type"
    with pytest.raises(RecoveryRefused) as refused:
        value.to_json(value.encode([1]) + b"\x00")
    assert (refused.value.kind, refused.value.reason, refused.value.offset) == (
        "invalid_payload", "trailing_bytes", 14)
    with pytest.raises(RecoveryRefused) as refused:
        value.to_json(value.encode([[[1]]]), value.DecodeLimits(depth=3))
    assert refused.value.kind == "resource_limit" and refused.value.reason == "depth_limit"
    assert value.to_json(value.encode({"b": [1.5, None], "a": "é"})) == '{"a":"é","b":[1.5,null]}'.encode()
