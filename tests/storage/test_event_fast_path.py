"""The native Event-v1 fast path (``tay._native.events_scan``) against the exact decoder.

A fast-path event must equal what ``decode_event_exact`` produces, and a payload the fast
path cannot vouch for must be refused with the exact decoder's class, reason and field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay._native import _pure_events, pure
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.formats import record, value
from tay.storage.events.definition import build_definition
from tay.storage.events.operations import (
    day_totals, failure_recorded, job_deleted, job_expedited, job_requeued,
)
from tests.build_guard import c_twin

c_native = c_twin()

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
JOB = bytes(15) + b"\x01"


def fixture_frames() -> list[record.Record]:
    frames = []
    for folder in (FIXTURES / "upstream" / "events" / "v1", FIXTURES / "tay" / "events" / "v2"):
        for path in sorted(folder.glob("*.hex")):
            data = bytes.fromhex("".join(path.read_text(encoding="ascii").split()))
            try:
                frames.append(record.decode_record(data))
            except RecoveryRefused:
                continue  # physically broken frames are the record decoder's business
    return frames


def outcome(event_type: int, schema: int, payload: bytes, exact: bool):
    """The decoded event, or the refusal's (class, kind, reason, field, offset)."""
    decode = ev.decode_event_exact if exact else ev.decode_event
    try:
        return decode(event_type, schema, payload)
    except RecoveryRefused as refused:
        return (type(refused), refused.kind, refused.reason, getattr(refused, "field", None),
                refused.offset)


def sample_events() -> list[ev.Event]:
    definition = build_definition(worker_key="w", queue_key="q", args={"a": [1, 2.5, None]},
                                  scheduled_at=50)
    return [
        ev.job_inserted(JOB, 10, definition),
        ev.job_available(JOB, 60, 1, 50),
        ev.job_started(JOB, 61, 2, 1, 1),
        ev.job_finished(JOB, 62, 3, execution_token=3, outcome=ev.WORKER_FAILURE,
                        diagnostic_code=2, disposition=ev.RETRYABLE, next_attempt=2,
                        next_due_at=1100),
        ev.job_finished(JOB, 62, 3, execution_token=3, outcome=ev.SUCCESS,
                        diagnostic_code=None, disposition=ev.COMPLETED),
        ev.job_cancelled(JOB, 70, 4, None),
        ev.job_cancelled(JOB, 70, 4, 9),
        ev.job_retried(JOB, 80, 5, ev.MODE_NEW_CYCLE),
        ev.result_recorded(JOB, 90, 6, {"ok": True, "n": -3}),
        failure_recorded(JOB, 91, 3, {"type": "ValueError", "message": "bad \u00e9 input",
                                         "traceback": "Traceback ...\n  line 1"}),
        failure_recorded(JOB, 92, 7, {"type": "T" * 128}),
        failure_recorded(JOB, 93, 2, {"message": ""}),
        failure_recorded(JOB, 94, 2, {"message": "m", "type": "E"}),
        # an operator's job steps: a requeue, an expedite, a deletion
        job_requeued(JOB, 95, 8),
        job_expedited(JOB, 96, 1),
        job_deleted(JOB, 2**63 - 1, 2**64 - 2),
        # a day's totals, the last day whose start is a Time, and the first
        day_totals(20_000, 12, 10, 2, 20_000 * 86_400_000 + 5),
        day_totals((2**63 - 1) // 86_400_000, 2**64 - 1, 0, 2**64 - 1, 2**63 - 1),
        day_totals(0, 0, 0, 0, 0),
    ]


SAMPLES = [(e.type, e.schema, ev.encode_event(e)) for e in sample_events()]


def test_fixtures_decode_the_same_on_both_paths() -> None:
    frames = fixture_frames()
    assert frames
    for frame in frames:
        payload = bytes(frame.payload)
        assert outcome(frame.type, frame.schema, payload, False) == \
            outcome(frame.type, frame.schema, payload, True)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: str(s[:2]))
def test_every_pair_takes_the_fast_path_and_equals_the_exact_decoder(sample) -> None:
    event_type, schema, payload = sample
    rows = c_native.events_scan(payload, [(0, len(payload), event_type, schema)])
    assert rows[0] == _pure_events.EVENT_FAST
    fast = ev.decode_event(event_type, schema, payload)
    exact = ev.decode_event_exact(event_type, schema, payload)
    assert fast == exact and dict(fast.payload) == dict(exact.payload)
    assert ev.encode_event(ev.make_event(fast.pair, dict(fast.payload))) == payload


def test_lazy_definition_keeps_bytes_and_reads_like_the_dict() -> None:
    event_type, schema, payload = SAMPLES[0]
    definition = ev.decode_event(event_type, schema, payload)["definition"]
    exact = ev.decode_event_exact(event_type, schema, payload)["definition"]
    assert type(definition).__name__ == "LazyDefinition"
    assert dict(definition) == exact and definition["args"] == {"a": [1, 2.5, None]}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SAMPLES), st.data())
def test_a_flipped_byte_is_refused_exactly_as_the_slow_path_refuses_it(sample, data) -> None:
    event_type, schema, payload = sample
    position = data.draw(st.integers(0, len(payload) - 1))
    flipped = bytearray(payload)
    flipped[position] ^= data.draw(st.integers(1, 255))
    flipped = bytes(flipped)
    assert outcome(event_type, schema, flipped, False) == outcome(event_type, schema, flipped, True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SAMPLES), st.integers(0, 10_000), st.integers(0, 255)),
                min_size=1, max_size=8))
def test_c_and_pure_batch_rows_agree_on_mutated_batches(items) -> None:
    buffer, records = b"", []
    for (event_type, schema, payload), position, mask in items:
        mutated = bytearray(payload)
        mutated[position % len(mutated)] ^= mask
        records.append((len(buffer), len(mutated), event_type, schema))
        buffer += bytes(mutated)
    assert c_native.events_scan(buffer, records) == pure.events_scan(buffer, records)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([(1, 1), (2, 1), (4, 1), (10, 2), (22, 2), (7, 1),
                                            (23, 2), (27, 2), (29, 2), (32, 2)]))
def test_c_and_pure_agree_on_arbitrary_bytes(payload, pair) -> None:
    records = [(0, len(payload), *pair)]
    assert c_native.events_scan(payload, records) == pure.events_scan(payload, records)


def test_batch_decode_yields_the_sequential_results_in_order() -> None:
    buffer = b"".join(p for _, _, p in SAMPLES)
    records, offset = [], 0
    for event_type, schema, payload in SAMPLES:
        records.append((offset, len(payload), event_type, schema))
        offset += len(payload)
    decoded = list(ev.decode_events(buffer, records))
    assert decoded == [ev.decode_event_exact(t, s, p) for t, s, p in SAMPLES]


JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=5))
def test_args_nodes_from_both_twins_equal_the_engine_measure(args) -> None:
    from tay.engine.validation.values import measure

    payload = ev.encode_event(ev.job_inserted(JOB, 10, build_definition(
        worker_key="w", queue_key="q", args=args)))
    records = [(0, len(payload), 1, 1)]
    rows = c_native.events_scan(payload, records)
    assert rows == pure.events_scan(payload, records)
    assert rows[_pure_events.STATUS] == _pure_events.EVENT_FAST
    definition = ev.decode_event(1, 1, payload)["definition"]
    assert definition.args_nodes == rows[_pure_events.ARGS_NODES] == measure(args, "args").nodes


ERROR_TEXTS = st.text(max_size=12) | st.text(max_size=140, alphabet="ab\u00e9\u4e2d")
ERRORS = st.dictionaries(st.sampled_from(["message", "traceback", "type"]), ERROR_TEXTS,
                         max_size=3)
ODD_ERRORS = st.dictionaries(st.sampled_from(["message", "traceback", "type", "code", "m", ""]),
                             ERROR_TEXTS | st.integers(0, 3) | st.none() | st.binary(max_size=3),
                             max_size=4)


@settings(max_examples=300, deadline=None)
@given(error=ERRORS | ODD_ERRORS, at=st.integers(0, 2**64 - 1) | st.integers(-3, -1),
       expected=st.integers(0, 3), job_id=st.sampled_from([JOB, bytes(16), b"\x01" * 15]),
       extra=st.booleans())
def test_failure_details_decode_on_both_paths_as_the_exact_decoder(error, at, expected, job_id,
                                                                   extra) -> None:
    """A (22,2) payload of any error object (valid or not: a missing or unknown key, a
    value that is not text, a type past 128 bytes, an empty map) and any field values:
    the fast path gives exactly the exact decoder's event or refusal, and C equals its twin."""
    payload = {"at": at, "error": error, "expected_revision": expected, "job_id": job_id}
    if extra:
        payload["queue"] = "q"
    data = value.encode(payload)
    assert outcome(22, 2, data, False) == outcome(22, 2, data, True)
    records = [(0, len(data), 22, 2)]
    rows = c_native.events_scan(data, records)
    assert rows == pure.events_scan(data, records)
    valid = (not extra and 1 <= len(error) and 0 <= at < 2**63 and expected >= 1
             and job_id == JOB and all(type(text) is str for text in error.values())
             and set(error) <= {"message", "traceback", "type"}
             and len(error.get("type", "").encode()) <= 128)
    assert (rows[0] == _pure_events.EVENT_FAST) == valid


@pytest.mark.parametrize("type_text", ["T" * n for n in range(126, 131)]
                         + ["\u00e9" * n for n in range(63, 66)] + ["T" + "\u00e9" * 64])
def test_a_failure_type_at_the_byte_limit_decodes_as_the_exact_decoder(type_text) -> None:
    """The error type's limit is 128 bytes of UTF-8, not characters: at, just under and just
    past it, on both twins."""
    data = value.encode({"at": 5, "error": {"type": type_text}, "expected_revision": 1,
                         "job_id": JOB})
    records = [(0, len(data), 22, 2)]
    for twin in (c_native, pure):
        rows = twin.events_scan(data, records)
        assert (rows[0] == _pure_events.EVENT_FAST) == (len(type_text.encode()) <= 128)
    assert outcome(22, 2, data, False) == outcome(22, 2, data, True)


def test_a_day_past_the_last_time_takes_the_exact_path_and_is_refused() -> None:
    """A day whose first millisecond is past the largest Time is not one the fast path
    vouches for: the exact decoder refuses it, on both paths alike."""
    last = (2**63 - 1) // 86_400_000
    payload = value.encode({"at": 0, "completed": 0, "day": last + 1, "enqueued": 0,
                            "failed": 0})
    rows = c_native.events_scan(payload, [(0, len(payload), 32, 2)])
    assert rows[0] == _pure_events.EVENT_SLOW
    refused = outcome(32, 2, payload, False)
    assert refused == outcome(32, 2, payload, True) and refused[3] == "day_totals.day"
