"""``value.encode_map`` (the event encoder's fast path) writes exactly ``value.encode``'s bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.storage import events as ev
from tay.storage.formats import value

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
           | st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), values, max_size=10))
def test_encode_map_equals_the_generic_encoder(mapping):
    assert value.encode_map(mapping) == value.encode(mapping)
    assert value.encode_map(mapping) == value.encode_map(dict(reversed(mapping.items())))


@pytest.mark.parametrize("mapping, reason", [
    ({1: 2}, "unsupported_type"),
    ({"a": 2**64}, "integer_out_of_range"),
    ({"a": float("nan")}, "non_finite_float"),
    ({"a": object()}, "unsupported_type"),
])
def test_encode_map_refuses_what_the_generic_encoder_refuses(mapping, reason):
    with pytest.raises(value.EncodeError) as generic:
        value.encode(mapping)
    with pytest.raises(value.EncodeError) as fast:
        value.encode_map(mapping)
    assert fast.value.reason == generic.value.reason == reason


ids = st.binary(min_size=16, max_size=16).filter(any)
times = st.integers(0, 2**63 - 1)
seqs = st.integers(1, 2**64 - 1)


@settings(max_examples=100, deadline=None)
@given(ids, times, seqs, st.integers(1, 100), seqs, st.sampled_from([None, 1, 2, 3, 4, 6]))
def test_built_events_encode_as_their_payload(job_id, at, revision, attempt, token, code):
    built = [
        ev.job_available(job_id, at, revision, at),
        ev.job_started(job_id, at, revision, attempt, token),
        ev.job_cancelled(job_id, at, revision, None if code is None else token),
        ev.job_retried(job_id, at, revision, ev.MODE_NEW_CYCLE),
        ev.result_recorded(job_id, at, revision, {"ok": [1, "x", None]}),
        ev.job_finished(job_id, at, revision, execution_token=token,
                        outcome=ev.SUCCESS if code is None else ev.WORKER_FAILURE,
                        diagnostic_code=code,
                        disposition=ev.COMPLETED if code is None else ev.DISCARDED),
    ]
    for event in built:
        raw = ev.encode_event(event)
        assert raw == value.encode(dict(event.payload))
        assert ev.decode_event(event.type, event.schema, raw) == event
