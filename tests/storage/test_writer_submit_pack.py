"""``NativeWriter.submit``'s packed meta (``pack_submission``: one ``struct`` pack per record)
equals the general field-by-field path (``submission_meta``) for every record it accepts,
and refuses what that path refuses with the same error; and the C writer frames what it is
given exactly as the Python encoder does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay.failures import RecoveryRefused
from tests.build_guard import pure_on_purpose
from tests.storage.json_strategies import SETTINGS
from tests.storage.test_committers import root  # noqa: F401  (the fixture)
from tay.storage.journal.native_commit import native_writer_available

pytestmark = pytest.mark.skipif(
    pure_on_purpose() and not native_writer_available(),
    reason="the C writer is not built and TAY_NATIVE=python was set on purpose")

U64 = 2**64 - 1
payloads = st.binary(max_size=64) | st.binary(max_size=8).map(bytearray) \
    | st.binary(max_size=8).map(memoryview)
records = st.tuples(st.integers(0, U64), st.integers(0, 300), st.integers(0, 300), payloads)
# anything a caller might pass by mistake: negative, too large, not an integer at all
wrong = st.integers(-(2**70), -1) | st.integers(U64 + 1, 2**70) | st.floats() | st.none() \
    | st.text(max_size=3) | st.booleans()


def general(recs):
    from tay._native.writer import submission_meta

    return submission_meta(recs).tobytes(), b"".join(record[3] for record in recs)


def outcome(function, recs):
    try:
        return function(recs)
    except Exception as error:  # the exact type and message must agree
        return type(error), str(error)


@SETTINGS
@given(st.lists(records, min_size=1, max_size=6))
def test_packed_meta_equals_the_general_path(recs) -> None:
    from tay._native.writer import pack_submission

    meta, blob = pack_submission(recs)
    assert (meta, blob) == general(recs)
    assert type(meta) is bytes and type(blob) is bytes


@SETTINGS
@given(st.lists(records, min_size=1, max_size=4), st.data())
def test_a_bad_field_is_refused_as_the_general_path_refuses_it(recs, data) -> None:
    from tay._native.writer import pack_submission

    index = data.draw(st.integers(0, len(recs) - 1))
    field = data.draw(st.integers(0, 2))
    bad = list(recs[index])
    bad[field] = data.draw(wrong)
    recs = [*recs[:index], tuple(bad), *recs[index + 1:]]
    assert outcome(pack_submission, recs) == outcome(general, recs)


def test_the_c_writer_reads_the_packed_meta_back_as_written(root) -> None:
    """End to end through tay_writer_submit: one and several records per submission, with
    bytes, bytearray and memoryview payloads, replayed as submitted."""
    from tests.storage.test_committers import open_store, replay

    journal, committer = open_store(root, "c", max_events=4)
    submissions = [[(1, 1, 1, b"one")],
                   [(2, 2, 1, b""), (3, 3, 1, bytearray(b"xy")), (4, 1, 1, memoryview(b"z" * 300))],
                   [(5, 2, 1, memoryview(b"last"))]]
    tickets = [committer.append(recs) for recs in submissions]
    committer.wait(tickets[-1], timeout=30)
    committer.close()
    journal.close()
    assert replay(root) == [(sequence, bytes(payload)) for recs in submissions
                            for sequence, _, _, payload in recs]


# -- NativeCommitter.append_events: an engine step's events packed in one call ----------------

class _RecordingWriter:
    """Stands in for NativeWriter: keeps what reaches submit_packed, refuses when told."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.packed: list[tuple[int, bytes, bytes, bool]] = []

    def submit_packed(self, count, meta, blob, hold):
        self.packed.append((count, meta, blob, hold))
        return 0 if self.refuse else 41


def _committer(writer):
    from tay.storage.journal.native_commit import NativeCommitter

    committer = object.__new__(NativeCommitter)  # no thread: only the packing is under test
    committer._writer = writer
    committer._ticket_base = 1000
    committer.appended = []
    committer.append = lambda records, hold=False: committer.appended.append(
        (records, hold)) or 7
    return committer


def _event(rtype, schema, raw):
    from tay.storage.events.registry import event_with_raw

    return event_with_raw(rtype, schema, "test", {"n": 1}, raw)


raws = st.binary(max_size=40) | st.binary(max_size=8).map(bytearray) \
    | st.binary(max_size=8).map(memoryview) | st.none()
steps = st.lists(st.tuples(st.integers(0, U64) | wrong, st.integers(0, 300) | wrong,
                           st.integers(0, 300), raws), min_size=0, max_size=4)


@SETTINGS
@given(steps, st.booleans(), st.booleans())
def test_append_events_packs_what_the_general_path_submits(step, hold, refuse) -> None:
    """The fast path hands the writer exactly pack_submission(journal_records(...)) or takes
    the general path (append of journal_records) itself, with the same hold; a refusal by the
    writer also ends in the general path, which raises as it always did."""
    from tay._native.writer import pack_submission
    from tay.storage.events import journal_records

    sequenced = [(sequence, _event(rtype, schema, raw)) for sequence, rtype, schema, raw in step]
    writer = _RecordingWriter(refuse)
    committer = _committer(writer)
    ticket = committer.append_events(sequenced, hold)
    records = journal_records(sequenced)
    if writer.packed:
        assert len(writer.packed) == 1
        count, meta, blob, packed_hold = writer.packed[0]
        assert (count, packed_hold) == (len(sequenced), hold)
        assert (meta, blob) == pack_submission(records)
    if writer.packed and not refuse:
        assert ticket == 1041 and committer.appended == []
    else:
        assert ticket == 7 and committer.appended == [(records, hold)]
    # the fast path takes every one-record and several-record step of bytes it can pack
    packable = all(type(raw) is bytes and type(s) is int and 0 <= s <= U64
                   and type(t) is int and 0 <= t <= U64 for s, t, _, raw in step)
    if packable and step:
        assert writer.packed


def test_append_events_reach_the_journal_as_append_writes_them(root) -> None:
    """End to end through the C writer: steps of one and two events, bytes and not, and a
    step the writer refuses (a sequence that does not continue) raises as append does."""
    from tay.storage.events import journal_records
    from tests.storage.test_committers import open_store, replay

    journal, committer = open_store(root, "c", max_events=4)
    steps = [[(1, _event(8, 1, b"insert"))],
             [(2, _event(30, 2, b"start")), (3, _event(8, 1, b"\x00" * 300))],
             [(4, _event(8, 1, None))],  # no bytes yet: encoded the general way
             [(5, _event(30, 2, bytearray(b"ba")))]]
    tickets = [committer.append_events(step) for step in steps]
    assert tickets == [1, 2, 3, 4]
    with pytest.raises(RecoveryRefused) as refused:
        committer.append_events([(9, _event(8, 1, b"gap"))])
    assert refused.value.reason == "sequence_discontinuity"
    committer.wait(tickets[-1], timeout=30)
    committer.close()
    journal.close()
    assert replay(root) == [(sequence, payload) for step in steps
                            for sequence, _, _, payload in journal_records(step)]


packable_steps = st.lists(st.tuples(st.integers(0, U64), st.integers(0, 300),
                                    st.integers(0, 300), st.binary(max_size=64)),
                          min_size=1, max_size=4) \
    | st.lists(st.tuples(st.integers(0, U64), st.integers(0, 300), st.integers(0, 300),
                         payloads), min_size=2, max_size=4)  # several: any bytes-like joins


@SETTINGS
@given(packable_steps, st.booleans())
def test_append_events_packs_steps_of_every_length_in_order(step, hold) -> None:
    """Steps whose every field packs (one to four records: a success with and without the
    next start is two or three, each of those lengths packed in one step of its own) reach
    the writer as ``pack_submission`` packs their records, in their order (one record only
    as ``bytes``; several joined from any bytes-like payloads)."""
    from tay._native.writer import pack_submission
    from tay.storage.events import journal_records

    sequenced = [(sequence, _event(rtype, schema, raw)) for sequence, rtype, schema, raw in step]
    writer = _RecordingWriter(False)
    committer = _committer(writer)
    assert committer.append_events(sequenced, hold) == 1041 and committer.appended == []
    count, meta, blob, packed_hold = writer.packed[0]
    assert (count, packed_hold) == (len(step), hold)
    assert (meta, blob) == pack_submission(journal_records(sequenced))
