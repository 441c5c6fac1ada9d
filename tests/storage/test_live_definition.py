"""A live definition kept as canonical bytes: equality, uncached args, one encoding per insert."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine.validation.values import measure
from tay.storage import events as ev
from tay.storage.formats import value
from tay.storage.events.definition import (
    LazyDefinition, PayloadRefused, args_json, build_definition, canonical_bytes,
    lazy_definition_in,
)
from tay.storage.v2 import decode_mutation, encode_mutation, mutation_from_parts

from .json_strategies import json_values

JOB = bytes(15) + b"\x07"
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1,
        "nested": {"list": [1, -2, 2.5, None, True, "é"]}}


def live(args=ARGS, **fields) -> tuple[dict, LazyDefinition]:
    plain = build_definition(worker_key="task", queue_key="alpha", args=args, **fields)
    canonical = value.encode(plain)
    lazy = LazyDefinition.from_live(plain, canonical, len(value.encode(plain["args"])), 11)
    return plain, lazy


@pytest.mark.parametrize("fields", [{}, {"scheduled_at": 99, "max_attempts": 3, "timeout_ms": 5}])
def test_from_live_reads_like_the_plain_definition(fields) -> None:
    plain, lazy = live(**fields)
    assert dict(lazy) == plain and lazy == plain
    assert lazy["args"] == ARGS and lazy.args_nodes == 11
    assert canonical_bytes(lazy) is lazy.canonical == value.encode(plain)


def test_reading_args_does_not_keep_them() -> None:
    _, lazy = live()
    first, second = lazy["args"], lazy.read_args()
    assert first == second == ARGS and first is not second
    first["payload"] = "changed"  # a reader's copy: the job's definition is unchanged
    assert lazy["args"] == ARGS
    assert lazy.args is lazy.args  # the property is the caching reader


def test_empty_args_span_is_exact() -> None:
    plain, lazy = live(args={})
    assert lazy["args"] == {} and dict(lazy) == plain


def test_from_live_refuses_bytes_that_are_not_a_definition() -> None:
    plain, _ = live()
    with pytest.raises(ValueError, match="args"):
        LazyDefinition.from_live(plain, value.encode({"zzz": 1}), 5, 1)
    with pytest.raises(ValueError):
        LazyDefinition.from_live(plain, value.encode(plain), 10**6, 1)


def test_insert_event_splices_the_stored_bytes_and_decodes_back() -> None:
    plain, lazy = live(scheduled_at=50)
    event = ev.job_inserted(JOB, 10, lazy)
    assert event["definition"] is lazy  # no dict copy of the live definition
    raw = ev.encode_event(event)
    assert raw == ev.encode_event(ev.job_inserted(JOB, 10, plain))
    assert lazy.canonical in raw
    decoded = ev.decode_event(1, 1, raw)
    assert dict(decoded["definition"]) == plain and decoded["eligible_at"] == 50


def test_v2_mutation_of_a_live_insert_round_trips() -> None:
    plain, lazy = live()
    event = ev.job_inserted(JOB, 10, lazy)
    body = {key: val for key, val in event.payload.items()
            if key not in ("job_id", "expected_revision", "at")}
    body["availability_order"] = 1
    mutation = mutation_from_parts(JOB, 1, 0, 1, 10, body)
    decoded = decode_mutation(encode_mutation(mutation))
    assert dict(decoded.event["definition"]) == plain


# ---- replay keeps a decoded definition's stored bytes (lazy_definition_in) ----------------

keys = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               min_size=1, max_size=8)
neighbours = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
        lambda name: name != "definition"),
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=6)
    | st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2), max_size=6)


@given(args=st.dictionaries(st.text(max_size=5), json_values, max_size=4), queue=keys,
       worker=keys, scheduled_at=st.none() | st.integers(0, 2**63 - 1),
       max_attempts=st.integers(1, 65_535), timeout_ms=st.integers(1, 86_400_000),
       others=neighbours)
@settings(max_examples=150, deadline=None)
def test_a_definition_decoded_inside_a_map_keeps_its_own_bytes(
        args, queue, worker, scheduled_at, max_attempts, timeout_ms, others) -> None:
    plain = build_definition(worker_key=worker, queue_key=queue, args=args,
                             scheduled_at=scheduled_at, max_attempts=max_attempts,
                             timeout_ms=timeout_ms)
    encoded = value.encode({**others, "definition": plain})
    decoded = value.decode(encoded)
    lazy = lazy_definition_in(memoryview(encoded), decoded)
    assert type(lazy) is LazyDefinition
    assert lazy.canonical == value.encode(plain) and canonical_bytes(lazy) == lazy.canonical
    assert dict(lazy) == plain and lazy["args"] == plain["args"]
    assert lazy.args_nodes == measure(plain["args"], "args").nodes  # the budget's count
    assert lazy.args_json() == args_json(plain)


def test_a_map_with_keys_it_cannot_size_keeps_the_plain_definition() -> None:
    plain, _ = live()
    encoded = value.encode({"é": 1, "definition": plain})
    decoded = value.decode(encoded)
    assert lazy_definition_in(encoded, decoded) is decoded["definition"]
    encoded = value.encode({"definition": {"not": "a definition"}, "z": 1})
    decoded = value.decode(encoded)
    assert lazy_definition_in(encoded, decoded) is decoded["definition"]


def test_replayed_inserts_and_snapshots_hold_lazy_definitions() -> None:
    from tay.storage.v2 import Snapshot, decode_snapshot, encode_snapshot

    plain, _ = live(scheduled_at=50)
    mutation = mutation_from_parts(JOB, 1, 0, 1, 10, {
        "availability_order": None, "definition": plain, "eligible_at": 50})
    raw_mutation = encode_mutation(mutation)
    decoded = decode_mutation(raw_mutation)
    assert type(decoded.event["definition"]) is LazyDefinition
    assert decoded.event["definition"] == plain and encode_mutation(decoded) == raw_mutation
    body = {"attempt": 0, "attempted_at": None, "availability_order": None,
            "completed_at": None, "definition": plain, "diagnostic": None,
            "eligible_at": 50, "inserted_at": 10, "next_attempt": 1, "state": "scheduled",
            "terminal_at": None}
    raw = encode_snapshot(Snapshot(JOB, 1, 1, None, body))
    snapshot = decode_snapshot(raw)
    assert type(snapshot.definition) is LazyDefinition and snapshot.definition == plain
    assert encode_snapshot(snapshot) == raw


SCALAR = st.sampled_from([0, 1, 2, True, False, 1.0, None, 2**40])
SCALAR_KEYS = ("max_attempts", "queue_key", "scheduled_at", "timeout_ms")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(SCALAR, st.sampled_from(["q", "r"]), SCALAR, SCALAR), max_size=8))
def test_definitions_of_one_kind_share_their_scalars_and_keep_their_types(kinds) -> None:
    """Equal plain int / str scalars share one tuple; a bool or float never reads as the int
    it equals (nor the reverse), whatever was built before."""
    canonical = value.encode(build_definition(worker_key="w", queue_key="q", args={}))
    start = len(canonical) - len(canonical.split(value.encode("args"), 1)[1])
    span = (start, start + len(value.encode({})))
    built = []
    for scalars in kinds:
        definition = LazyDefinition(canonical, span, 0, *scalars, "w")
        assert [(type(definition[key]), definition[key]) for key in SCALAR_KEYS] == \
            [(type(item), item) for item in scalars]
        built.append((scalars, definition))
    for scalars, first in built:
        plain = type(scalars[0]) is int and type(scalars[3]) is int and \
            (scalars[2] is None or type(scalars[2]) is int)
        for other, second in built:
            if plain and [(type(x), x) for x in scalars] == [(type(x), x) for x in other]:
                assert first.scalars is second.scalars


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 3, True, 2.0]), st.sampled_from(["q", "r", ""]),
                          st.sampled_from([None, 0, 99, True]), st.sampled_from([1, 5, False])),
                max_size=8))
def test_from_args_value_builds_what_the_constructor_builds(kinds) -> None:
    """The live insert's builder (no __init__ call) refuses what build_definition refuses,
    and otherwise holds the constructor's bytes, args span and shared scalars tuple."""
    args = {"a": [1, "b"]}
    args_value = value.encode(args)
    for max_attempts, queue, scheduled_at, timeout_ms in kinds:
        fields = {"worker_key": "w", "queue_key": queue, "max_attempts": max_attempts,
                  "scheduled_at": scheduled_at, "timeout_ms": timeout_ms}
        try:
            plain = build_definition(args=args, **fields)
        except PayloadRefused as refused:
            with pytest.raises(PayloadRefused) as raised:
                LazyDefinition.from_args_value(args_value, 4, **fields)
            assert raised.value.message == refused.message
            continue
        lazy = LazyDefinition.from_args_value(args_value, 4, **fields)
        canonical = value.encode(plain)
        start = canonical.index(args_value)
        built = LazyDefinition(canonical, (start, start + len(args_value)), 4, max_attempts,
                               queue, scheduled_at, timeout_ms, "w")
        assert lazy.canonical == canonical and lazy == plain and lazy.args_nodes == 4
        assert lazy.scalars is built.scalars and lazy.read_args() == args
