"""``NativeWriter.submit``'s packed meta (``pack_submission``: one ``struct`` pack per record)
equals the general field-by-field path (``submission_meta``) for every record it accepts,
and refuses what that path refuses with the same error; and the C writer frames what it is
given exactly as the Python encoder does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
