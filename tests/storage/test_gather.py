"""Gathering (group commit under load, docs/journal.md): the rule both writers share, and
each writer holding a flushed batch only under that rule and only until its siblings are
queued, a full batch, its bound, a blocked ``wait`` caller or close; a gathering batch is
not durable (nothing in it is acknowledged) until it is written."""

from __future__ import annotations

import contextlib
import shutil
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.build_guard import pure_on_purpose
from tests.storage.conftest import scratch_path
from tests.storage.test_committers import WRITERS, open_store as open_plain
from tay.storage.journal.commit import gather_wait
from tay.storage.journal.native_commit import NativeCommitter, native_writer_available

NEEDS_C = pytest.mark.skipif(pure_on_purpose() and not native_writer_available(),
                             reason="the C writer is not built (TAY_NATIVE=python on purpose)")
LONG = 400 * 10**9  # a "recent fdatasync" of 400 s: every gathering window is the cap's
CAP_US = 100 * 10**6  # 100 s: no test waits this out


@pytest.fixture(params=WRITERS)
def writer(request):
    return request.param


@pytest.fixture
def root():
    path = scratch_path("gather")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def believe_fdatasync_takes(committer, sync_avg_ns: int) -> None:
    if isinstance(committer, NativeCommitter):
        committer._writer.test_sync_avg(sync_avg_ns)
    else:
        with committer._cond:
            committer._sync_avg_ns = sync_avg_ns


@contextlib.contextmanager
def gathering(root, writer, gather_us, sync_avg_ns, max_events=64, **options):
    """A group-commit committer that gathers for up to ``gather_us`` and believes a recent
    fdatasync took ``sync_avg_ns``; closed, with its journal, afterwards."""
    journal, committer = open_plain(root, writer, max_events=max_events, gather_us=gather_us,
                                    **options)
    try:
        believe_fdatasync_takes(committer, sync_avg_ns)
        yield committer
    finally:
        committer.close()  # a second close is a no-op
        journal.close()


def submit(committer, seq: int) -> int:
    return committer.append([(seq, 1, 1, b"x%d" % seq)], hold=True)


def durable(committer, ticket: int, timeout: float = 30.0) -> None:
    """Poll, as the event loop does (``wait`` would be a blocked caller: no gathering)."""
    deadline = time.monotonic() + timeout
    while committer.durable < ticket:
        assert committer.stopped is None and time.monotonic() < deadline
        time.sleep(0.0005)


def batch_of_three(committer) -> None:
    tickets = [submit(committer, seq) for seq in (1, 2, 3)]
    committer.flush()
    durable(committer, tickets[-1])
    assert (committer.stats().batches, committer.stats().gathered) == (1, 0)


def lone_after_batch_of_three(committer) -> int:
    """A batch of three made durable, then one submission flushed (its ticket): the
    previous batch had siblings, so under load this one gathers."""
    batch_of_three(committer)
    lone = submit(committer, 4)
    committer.flush()
    return lone


# -- the rule ----------------------------------------------------------------------------
def test_the_rule_waits_only_under_load_and_at_most_an_fdatasync_and_the_cap():
    ms = 1_000_000
    assert gather_wait(1, 3, 100_000, 4 * ms, 500_000) == 500_000  # capped
    assert gather_wait(1, 3, 100_000, 4 * ms // 10, 500_000) == 400_000  # one fdatasync
    assert gather_wait(2, 3, 0, 4 * ms, 500_000) == 500_000
    assert gather_wait(1, 1, 0, 4 * ms, 500_000) == 0  # a lone submitter: no siblings
    assert gather_wait(3, 3, 0, 4 * ms, 500_000) == 0  # the siblings are all here
    assert gather_wait(1, 3, 4 * ms, 4 * ms, 500_000) == 0  # quiet: idle a whole fdatasync
    assert gather_wait(1, 3, -1, 4 * ms, 500_000) == 0  # no batch before
    assert gather_wait(1, 3, 0, 0, 500_000) == 0  # no fdatasync (durability write)
    assert gather_wait(1, 3, 0, 4 * ms, 0) == 0  # gathering off


@NEEDS_C
@given(queued=st.integers(1, 80), siblings=st.integers(0, 80),
       since=st.integers(-5, 10**10), sync=st.integers(0, 10**10), cap=st.integers(0, 10**9))
def test_both_writers_share_the_rule(queued, siblings, since, sync, cap):
    from tay._native.writer import gather_wait as c_gather_wait

    wait = gather_wait(queued, siblings, since, sync, cap)
    assert c_gather_wait(queued, siblings, since, sync, cap) == wait
    under_load = cap > 0 and 2 <= siblings and queued < siblings and 0 <= since < sync
    assert (wait > 0) == under_load
    assert wait <= cap and wait <= sync


# -- each writer -------------------------------------------------------------------------
def test_under_load_a_batch_waits_for_its_siblings_and_goes_when_they_are_queued(writer, root):
    with gathering(root, writer, CAP_US, LONG) as committer:
        lone = lone_after_batch_of_three(committer)
        time.sleep(0.05)
        assert committer.durable < lone  # gathering: written with its siblings, not alone
        submit(committer, 5)
        last = submit(committer, 6)  # three queued, as many as the batch before: it goes
        committer.flush()
        durable(committer, last)
        stats = committer.stats()
        assert (stats.batches, stats.gathered, stats.largest_batch) == (2, 1, 3)


def test_a_gathering_batch_goes_at_its_bound(writer, root):
    with gathering(root, writer, 20_000, LONG) as committer:  # cap 20 ms
        lone = lone_after_batch_of_three(committer)
        durable(committer, lone)  # nothing else arrives: it goes at the cap
        assert (committer.stats().batches, committer.stats().gathered) == (2, 1)


def test_a_blocked_caller_or_close_ends_a_gathering_wait(writer, root):
    with gathering(root, writer, CAP_US, LONG) as committer:
        lone = lone_after_batch_of_three(committer)
        time.sleep(0.02)
        committer.wait(lone, timeout=30)  # far less than the 100 s window
        assert committer.stats().gathered == 1
        batch = [submit(committer, 5), submit(committer, 6)]
        committer.flush()
        durable(committer, batch[-1])
        last = submit(committer, 7)
        committer.flush()
        time.sleep(0.02)
        assert committer.durable < last and committer.stats().gathered == 2
        committer.close()  # drains at once
        assert committer.durable >= last


def test_a_lone_submitter_never_waits(writer, root):
    with gathering(root, writer, CAP_US, LONG) as committer:
        for seq in range(1, 6):
            ticket = submit(committer, seq)
            committer.flush()
            durable(committer, ticket)
        assert (committer.stats().batches, committer.stats().gathered) == (5, 0)


def test_a_quiet_writer_never_waits(writer, root):
    # a recent fdatasync of 1 ns: the writer was idle longer than that before each batch
    with gathering(root, writer, CAP_US, LONG) as committer:
        batch_of_three(committer)
        believe_fdatasync_takes(committer, 1)
        lone = submit(committer, 4)
        committer.flush()
        durable(committer, lone)
        assert committer.stats().gathered == 0


def test_gathering_is_off_without_group_commit(writer, root):
    with gathering(root, writer, CAP_US, LONG, max_events=1) as committer:
        durable(committer, [submit(committer, seq) for seq in (1, 2, 3)][-1])
        durable(committer, submit(committer, 4))  # one event per batch, none waits
        assert (committer.stats().batches, committer.stats().gathered) == (4, 0)


def test_gathering_is_off_with_linger(writer, root):
    with gathering(root, writer, CAP_US, LONG, interval_ms=1, linger=True) as committer:
        lone = lone_after_batch_of_three(committer)  # each batch waits out its 1 ms interval
        durable(committer, lone)
        assert committer.stats().gathered == 0
