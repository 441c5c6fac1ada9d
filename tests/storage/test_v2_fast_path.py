"""The native Store-v2 replay fast path (``snapshots_scan``, ``mutations_scan``,
``tay.storage.v2.fast``).

C equals its pure twin on any bytes; a record the fast path vouches for decodes to exactly
what the exact decoders return (so a flipped byte never yields a wrong record: it is either
refused by the exact decoder or decodes the same on both paths); and replaying a compacted
store through the fast path leaves the same jobs as the exact path.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from tay._native import _pure_snapshots, pure
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.compaction.offline import compact_offline
from tay.storage.events.definition import build_definition
from tay.storage.events.operations import failure_recorded
from tay.storage.events.transitions import apply, attachments
from tay.storage.formats import value
from tay.storage.formats.value import DecodeLimits
from tay.storage.formats.value import encode as encode_value
from tay.storage.recovery import store_v2 as replay_module
from tay.storage.recovery.recover import TableConsumer, recover
from tay.storage.v2 import Retention, fast
from tay.storage.v2.epoch_records import (
    decode_epoch_event, decode_job_attachment, encode_epoch_event, encode_job_attachment,
)
from tay.storage.v2.jobs import job_of, snapshot_of
from tay.storage.v2.records import (
    Mutation, decode_mutation, decode_snapshot, encode_mutation, encode_snapshot,
)
from tests.build_guard import c_twin
from tests.storage.conftest import scratch_path
from tests.storage.test_transitions import histories

c_native = c_twin()
LIMITS = DecodeLimits()
PREFIX = struct.Struct(">16sQQB")
ARGS = st.dictionaries(st.text(max_size=4), st.none() | st.booleans() | st.integers(-5, 2**64 - 1)
                       | st.text(max_size=6) | st.lists(st.integers(0, 3), max_size=3),
                       max_size=3)


def final_state(history: list[ev.Event]):
    job = None
    for sequence, event in enumerate(history, 1):
        job = apply(job, sequence, event)
    return job


@st.composite
def jobs(draw):
    """A job's final state after a random valid history, with random args and keys."""
    history = draw(histories())
    job = final_state(history[:draw(st.integers(1, len(history)))])  # every state, often
    definition = build_definition(
        worker_key=draw(st.sampled_from(["w", "wörker", "x" * 255])), queue_key="q",
        args=draw(ARGS), max_attempts=job.max_attempts,
        scheduled_at=job.definition["scheduled_at"])
    return job._replace(definition=definition, definition_bytes=None)


def payloads(job) -> list[tuple[int, int, bytes]]:
    """The job's base records: its (7,1) snapshot, then its (31,2) attachments."""
    snapshot = snapshot_of(job)
    out = [(7, 1, encode_snapshot(snapshot))]
    out += [(31, 2, encode_job_attachment(event)) for event in attachments(job)]
    return out


def exact(pair: tuple[int, int], payload: bytes):
    try:
        if pair == (7, 1):  # the fast path gives the job the snapshot describes
            return job_of(decode_snapshot(payload, LIMITS))
        if pair == (31, 2):
            return decode_job_attachment(payload, LIMITS)
        return decode_epoch_event(payload, LIMITS)
    except RecoveryRefused as refused:
        return refused


def fast_decoded(pair: tuple[int, int], payload: bytes):
    return fast.decode_batch(payload, [(0, len(payload), *pair)], LIMITS)[0]


def check_one(pair: tuple[int, int], payload: bytes) -> None:
    """Twins agree; whatever the fast path vouches for, the exact decoder returns too."""
    if pair == (7, 1):
        assert c_native.snapshots_scan(payload, [(0, len(payload))]) == \
            pure.snapshots_scan(payload, [(0, len(payload))])
    decoded = fast_decoded(pair, payload)
    if decoded is not None:
        assert exact(pair, payload) == decoded


@settings(max_examples=150, deadline=None)
@given(jobs())
def test_valid_base_records_take_the_fast_path_and_decode_exactly(job) -> None:
    for rtype, schema, payload in payloads(job):
        decoded = fast_decoded((rtype, schema), payload)
        assert decoded is not None
        assert decoded == exact((rtype, schema), payload)
        check_one((rtype, schema), payload)
    replayed_job = fast_decoded((7, 1), payloads(job)[0][2])
    assert replayed_job.definition_bytes == encode_value(job.definition)
    assert dict(replayed_job.definition) == dict(job.definition)
    assert replayed_job == job._replace(definition_bytes=replayed_job.definition_bytes,
                                        result_present=False, result=None, failure=None,
                                        ready_order=job.ready_order
                                        if job.state == "available" else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.data())
def test_a_damaged_record_is_refused_or_decodes_the_same_on_both_paths(job, data) -> None:
    records = payloads(job)
    rtype, schema, payload = records[data.draw(st.integers(0, len(records) - 1))]
    raw = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    check_one((rtype, schema), bytes(raw))


STATES = ("scheduled", "available", "executing", "retryable", "completed", "cancelled",
          "discarded", "paused")
FIELD_VALUES = (st.none() | st.integers(0, 6) | st.integers(2**63 - 2, 2**64 - 1)
                | st.sampled_from(STATES) | st.sampled_from([
                    {"code": 1, "version": 1}, {"code": 8, "version": 1},
                    {"code": 5, "version": 2}, {"code": 2}, True, -1, b"x"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.data())
def test_a_snapshot_with_changed_fields_is_refused_or_decodes_the_same(job, data) -> None:
    """Field-level damage (another value in a body field or prefix token), re-encoded as a
    canonical Value: it hits the domain, presence and credibility rules far more often than
    a flipped byte does."""
    snapshot = snapshot_of(job)
    body = dict(snapshot.body)
    body["definition"] = value.Precoded(job.definition_bytes or encode_value(job.definition))
    tokens = [snapshot.revision, snapshot.cycle, snapshot.execution]
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.integers(0, 4)) == 0:
            tokens[data.draw(st.integers(0, 2))] = data.draw(st.none() | st.integers(0, 6))
        else:
            key = data.draw(st.sampled_from(sorted(k for k in body if k != "definition")))
            body[key] = data.draw(FIELD_VALUES | st.sampled_from(list(body.values())))
    revision, cycle, execution = tokens
    if revision is None or cycle is None:
        return
    check_one((7, 1), snapshot_raw(snapshot, body, revision, cycle, execution))


def one_job_in_each_state() -> list:
    found = []
    for state in STATES[:-1]:
        found.append(find(jobs(), lambda job, state=state: job.state == state,
                          settings=settings(database=None, max_examples=2000)))
    return found


def snapshot_raw(snapshot, body: dict, revision: int, cycle: int, execution) -> bytes:
    return PREFIX.pack(snapshot.job_id, revision, cycle, execution is not None) + (
        b"" if execution is None else execution.to_bytes(8, "big")) + value.encode_map(body)


def test_every_single_field_change_in_every_state_is_refused_or_decodes_the_same() -> None:
    """Each body field and prefix token of a credible snapshot in each state, set to each
    of a set of values around the rules' boundaries (other fields' values included)."""
    for job in one_job_in_each_state():
        snapshot = snapshot_of(job)
        body = dict(snapshot.body)
        body["definition"] = value.Precoded(encode_value(job.definition))
        tokens = (snapshot.revision, snapshot.cycle, snapshot.execution)
        near = {None, 0, 1, 2, 3, 2**63 - 1, 2**63, 2**64 - 1} | {
            item + step for item in list(body.values()) + list(tokens)
            if type(item) is int for step in (-1, 1) if 0 <= item + step < 2**64}
        candidates = list(near) + list(STATES) + [
            {"code": 1, "version": 1}, {"code": 5, "version": 1}, {"code": 7, "version": 1},
            {"code": 8, "version": 1}, {"code": 1, "version": 2}, True]
        assert fast_decoded((7, 1), snapshot_raw(snapshot, body, *tokens)) is not None
        for key in sorted(k for k in body if k != "definition"):
            for candidate in candidates:
                check_one((7, 1), snapshot_raw(snapshot, {**body, key: candidate}, *tokens))
        for index in range(3):
            for candidate in near:
                changed = list(tokens)
                changed[index] = candidate
                if (changed[0] is None or changed[1] is None
                        or not all(t is None or t >= 0 for t in changed)):
                    continue
                check_one((7, 1), snapshot_raw(snapshot, body, *changed))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_agree_on_both_twins(raw: bytes) -> None:
    for pair in ((7, 1), (31, 2), (30, 2)):
        check_one(pair, raw)
    check_one((7, 1), bytes(16) + raw)


def test_the_snapshot_row_layout_is_the_documented_one() -> None:
    assert c_native.lib.TAY_SNAPSHOT_ROW == _pure_snapshots.SNAPSHOT_ROW == 40


@settings(max_examples=100, deadline=None)
@given(jobs(), st.integers(1, 5))
def test_epoch_events_take_the_fast_path_and_decode_exactly(job, extra) -> None:
    for event in attachments(job):
        payload = encode_epoch_event(event, event["expected_revision"] + extra)
        decoded = fast_decoded((30, 2), payload)
        assert decoded is not None and decoded == exact((30, 2), payload)
        stale = encode_epoch_event(event, event["expected_revision"] + 1)[:2] + \
            event["expected_revision"].to_bytes(8, "big") + payload[10:]
        assert fast_decoded((30, 2), stale) is None  # refused by the exact decoder
        assert isinstance(exact((30, 2), stale), RecoveryRefused)


def write_and_compact(root: Path, histories_: list[list[ev.Event]]) -> None:
    """Each history as one job (its own id), journaled in order, then compacted."""
    from tay.storage.journal.writer import init_store

    init_store(str(root), durability="write")
    journal = recover(str(root), durability="write").journal
    records, sequence = [], 0
    for number, history in enumerate(histories_, 1):
        job_id = number.to_bytes(16, "big")
        offset = sequence
        for event in history:
            payload = dict(event.payload)
            payload["job_id"] = job_id
            if payload.get("expected_revision"):
                payload["expected_revision"] += offset
            for key in ("cycle_token", "execution_token"):
                if payload.get(key):
                    payload[key] += offset
            sequence += 1
            records.append((sequence, ev.make_event(event.pair, payload)))
    journal.append_batch(ev.journal_records(records))
    journal.sync()
    journal.close()
    compact_offline(str(root), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)


def replayed(root: Path) -> dict:
    table = TableConsumer()
    recover(str(root), consumer=table, activate=False)
    return {state.id: state for state in table.table}


def replayed_both_ways(root: Path) -> tuple[dict, dict]:
    """The jobs replay leaves through the fast path, and with every record on the exact one."""
    through_fast = replayed(root)
    original = replay_module.decode_batch
    replay_module.decode_batch = lambda buffer, records, limits, rows: [None] * len(records)
    try:
        return through_fast, replayed(root)
    finally:
        replay_module.decode_batch = original


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(histories(), min_size=1, max_size=4))
def test_replay_through_the_fast_path_equals_the_exact_path(histories_) -> None:
    root = scratch_path("v2-fast")
    try:
        write_and_compact(root, histories_)
        through_fast, through_exact = replayed_both_ways(root)
        assert through_fast == through_exact
        assert len(through_fast) == len(histories_)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- (8,1) mutations -----------------------------------------------------------------------

def mutations_of(history: list[ev.Event], orders: list[int]) -> list[bytes]:
    """Each lifecycle event of a one-job history as its (8,1) payload (S = its index)."""
    out = []
    for revision, event in enumerate(history, 1):
        if event.pair not in ev.LIFECYCLE_PAIRS:
            continue
        payload = event.payload
        ordered = event.pair in (ev.JOB_AVAILABLE, ev.JOB_RETRIED) or (
            event.pair == ev.JOB_INSERTED and payload["eligible_at"] <= payload["at"])
        order = orders[revision % len(orders)] if ordered else None
        out.append(encode_mutation(Mutation(payload["job_id"], event.type, revision - 1,
                                            revision, payload["at"], order, event)))
    return out


def exact_mutation(payload: bytes):
    try:
        return decode_mutation(payload, LIMITS)
    except RecoveryRefused as refused:
        return refused


def check_mutation(payload: bytes) -> None:
    assert c_native.mutations_scan(payload, [(0, len(payload))]) == \
        pure.mutations_scan(payload, [(0, len(payload))])
    decoded = fast_decoded((8, 1), payload)
    if decoded is not None:
        assert exact_mutation(payload) == decoded
        assert decoded.event.raw is None  # the event's own bytes are not the mutation's


ORDERS = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None)
@given(histories(), ORDERS)
def test_valid_mutations_take_the_fast_path_and_decode_exactly(history, orders) -> None:
    for payload in mutations_of(history, orders):
        decoded = fast_decoded((8, 1), payload)
        assert decoded is not None and decoded == exact_mutation(payload)
        check_mutation(payload)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), ORDERS, st.data())
def test_a_damaged_mutation_is_refused_or_decodes_the_same(history, orders, data) -> None:
    payloads = mutations_of(history, orders)
    raw = bytearray(payloads[data.draw(st.integers(0, len(payloads) - 1))])
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    check_mutation(bytes(raw))


MUTATION_PREFIX = struct.Struct(">16sBQQQ")


def test_every_single_field_change_of_each_kind_is_refused_or_decodes_the_same() -> None:
    """Each body field and prefix field of a valid mutation of every kind, set to values
    around the rules' boundaries (other fields' values included)."""
    definition = build_definition(worker_key="w", queue_key="q", args={"a": [1]},
                                  scheduled_at=50)
    job = bytes(15) + b"\x01"
    samples = [
        (ev.job_inserted(job, 10, definition), None),
        (ev.job_inserted(job, 60, definition), 1),
        (ev.job_available(job, 60, 1, 50), 2),
        (ev.job_started(job, 61, 2, 1, 1), None),
        (ev.job_finished(job, 62, 3, execution_token=3, outcome=ev.WORKER_FAILURE,
                         diagnostic_code=2, disposition=ev.RETRYABLE, next_attempt=2,
                         next_due_at=1100), None),
        (ev.job_finished(job, 62, 3, execution_token=3, outcome=ev.SUCCESS,
                         diagnostic_code=None, disposition=ev.COMPLETED), None),
        (ev.job_cancelled(job, 70, 4, 9), None),
        (ev.job_retried(job, 80, 5, ev.MODE_NEW_CYCLE), 3),
    ]
    for event, order in samples:
        expected = event.payload["expected_revision"]
        raw = encode_mutation(Mutation(job, event.type, expected, expected + 1,
                                       event.payload["at"], order, event))
        assert fast_decoded((8, 1), raw) is not None
        prefix, body = list(MUTATION_PREFIX.unpack_from(raw)), value.decode(raw[41:])
        if "definition" in body:
            body["definition"] = value.Precoded(encode_value(body["definition"]))
        near = {None, 0, 1, 2, 3, 4, 5, 6, 7, 2**63 - 1, 2**63, 2**64 - 1} | {
            item + step for item in list(body.values()) + prefix[1:]
            if type(item) is int for step in (-1, 1) if 0 <= item + step < 2**64}
        candidates = list(near) + [{"code": 2, "version": 1}, {"code": 5, "version": 1},
                                   {"code": 7, "version": 1}, {"code": 2, "version": 2},
                                   True, "x"]
        for key in list(body) + ["availability_order", "extra"]:
            for candidate in candidates:
                changed = {**body, key: candidate}
                check_mutation(raw[:41] + value.encode_map(changed))
            check_mutation(raw[:41] + value.encode_map({k: v for k, v in body.items()
                                                        if k != key}))
        for index in range(1, 5):
            for candidate in near:
                if candidate is None or (index == 1 and candidate > 255):
                    continue
                changed = list(prefix)
                changed[index] = candidate
                check_mutation(MUTATION_PREFIX.pack(*changed) + raw[41:])
        check_mutation(bytes(16) + raw[16:])


def test_an_engine_written_tail_replays_the_same_through_the_fast_path(data_dir) -> None:
    from tests.storage.test_store_v2_rules import compacted_store

    through_fast, through_exact = replayed_both_ways(compacted_store(data_dir))
    assert through_fast == through_exact and len(through_fast) > 10


def test_each_thread_scans_on_its_own_node_tape() -> None:
    # cffi releases the GIL during a scan, and replay and the online compactor scan at the
    # same time: a tape shared between threads would be written by both at once.
    import threading
    from tay._native import c as c_module
    here = c_module._event_tape()
    seen: list = []
    other = threading.Thread(target=lambda: seen.append(c_module._event_tape()))
    other.start()
    other.join()
    assert c_module._event_tape() is here  # reused within a thread
    assert len(seen) == 1 and all(mine is not theirs for mine, theirs in zip(here, seen[0]))


def test_threads_scanning_at_once_get_the_single_threaded_rows() -> None:
    import threading
    job = find(jobs(), lambda j: len(j.definition["args"]) >= 2)
    snapshot = payloads(job)[0][2]
    damaged = snapshot[:-1] + bytes([snapshot[-1] ^ 0x40])
    buf = (snapshot + damaged) * 200
    step = len(snapshot)
    records = [(i * step, step) for i in range(400)]
    expected = c_native.snapshots_scan(buf, records)
    results: list = []

    def scan() -> None:
        results.extend(c_native.snapshots_scan(buf, records) == expected for _ in range(20))

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 80


ERRORS = st.dictionaries(st.sampled_from(["message", "traceback", "type"]),
                         st.text(max_size=10), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(error=ERRORS, at=st.integers(0, 2**40), expected=st.integers(1, 50),
       extra=st.integers(1, 5), data=st.data())
def test_failure_details_take_the_fast_path_and_decode_exactly(error, at, expected, extra,
                                                                data) -> None:
    """A failure's (22,2) details as a base's (31,2) attachment and as a tail's (30,2)
    event: the fast path gives exactly the exact decoder's object, and a damaged copy is
    refused or decodes the same on both paths."""
    event = failure_recorded(b"\x00" * 15 + b"\x07", at, expected, error)
    for pair, payload in (((31, 2), encode_job_attachment(event)),
                          ((30, 2), encode_epoch_event(event, expected + extra))):
        decoded = fast_decoded(pair, payload)
        assert decoded is not None and decoded == exact(pair, payload)
        raw = bytearray(payload)
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        check_one(pair, bytes(raw))
