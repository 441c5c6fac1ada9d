"""A live definition kept as canonical bytes: equality, uncached args, one encoding per insert."""

from __future__ import annotations

import pytest

from tay.storage import events as ev
from tay.storage.formats import value
from tay.storage.events.definition import LazyDefinition, build_definition, canonical_bytes
from tay.storage.v2 import decode_mutation, encode_mutation, mutation_from_parts

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
