"""GroupCommitter rules not pinned elsewhere: acknowledgement only after the batch's fsync,
a failed fsync fails the batch and everything queued behind it, natural batching (held
submissions wait for ``flush``, a full batch or their interval) and the ``interval_ms``
deadline counting from a submission's arrival."""

from __future__ import annotations

import errno
import threading

import pytest

from tay.failures import WriterStopped
from tay.storage.journal.commit import GroupCommitter
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import init_store
from tests.storage.test_journal import data_dir, open_journal, records  # noqa: F401 (fixture)


class GatedSyncIO(RealIO):
    """Holds every fdatasync until the test opens the gate; can make the held one fail."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail_with: int | None = None

    def fdatasync(self, fd: int) -> None:
        self.entered.set()
        assert self.gate.wait(10), "test never opened the gate"
        if self.fail_with is not None:
            raise OSError(self.fail_with, "injected")
        super().fdatasync(fd)


class FakeClock:
    """A settable clock that also tells when the writer thread has read it.

    The writer reads the clock under the committer's lock right before waiting for a
    batch deadline, so once ``read_by_writer`` is set the writer is (or is about to be)
    waiting with the time it saw: moving ``now`` after that cannot race its decision.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.read_by_writer = threading.Event()

    def __call__(self) -> float:
        if threading.current_thread() is not threading.main_thread():
            self.read_by_writer.set()
        return self.now


@pytest.fixture
def gated(data_dir):  # noqa: F811 (the imported fixture)
    init_store(data_dir, validated_filesystem=True)
    io = GatedSyncIO()
    io.gate.set()
    journal, _ = open_journal(data_dir, io=io)  # activation fsyncs pass through the open gate
    io.gate.clear()
    yield io, journal
    io.gate.set()
    journal.close()


def test_no_acknowledgement_before_the_batch_fsync_returns(gated):
    io, journal = gated
    committer = GroupCommitter(journal)
    future = committer.submit(records(1, 1))
    assert io.entered.wait(10)
    assert not future.done()  # written, but its fsync has not returned
    io.gate.set()
    assert future.result(timeout=10).last_sequence == 1
    committer.close()


def test_a_failed_fsync_fails_the_batch_every_queued_ack_and_later_submits(gated):
    io, journal = gated
    committer = GroupCommitter(journal)
    in_flight = committer.submit(records(1, 1))
    assert io.entered.wait(10)
    queued = [committer.submit(records(seq, 1)) for seq in (2, 3, 4)]
    io.fail_with = errno.EIO
    io.gate.set()
    with pytest.raises(WriterStopped) as first:
        in_flight.result(timeout=10)
    assert first.value.extra["errno"] == errno.EIO
    for future in queued:
        assert future.exception(timeout=10) is first.value
    assert committer.submit(records(5, 1)).exception(timeout=10) is first.value
    assert committer.stats().batches == 0
    committer.close()


def test_interval_waits_for_the_batch_to_fill_then_writes_it_whole(gated):
    io, journal = gated
    io.gate.set()
    clock = FakeClock()
    committer = GroupCommitter(journal, max_events=3, interval_ms=60_000, clock=clock)
    futures = [committer.submit(records(seq, 1), hold=True) for seq in (1, 2, 3)]  # full
    receipts = [future.result(timeout=10) for future in futures]  # no 60 s wait: it is full
    assert {receipt.count for receipt in receipts} == {3}
    assert committer.stats().batches == 1
    committer.close()


def test_a_lone_submission_is_written_once_its_interval_has_passed(gated):
    io, journal = gated
    io.gate.set()
    clock = FakeClock()
    committer = GroupCommitter(journal, max_events=10, interval_ms=60_000, clock=clock)
    lone = committer.submit(records(1, 1), hold=True)
    # the writer must have seen t=0 before time moves: otherwise it could take t=60 as
    # lone's deadline and write it alone (the race that made this test flaky under load)
    assert clock.read_by_writer.wait(10)
    assert not lone.done()  # waiting for company
    clock.now = 60.0
    late = committer.submit(records(2, 1), hold=True)  # wakes the writer: deadline passed
    assert lone.result(timeout=10).count == 2 and late.result(timeout=10).count == 2
    committer.close()


def test_time_spent_behind_an_earlier_fsync_counts_toward_the_interval(gated):
    io, journal = gated
    clock = FakeClock()
    committer = GroupCommitter(journal, max_events=1, interval_ms=60_000, clock=clock)
    first = committer.submit(records(1, 1))  # a full batch: written at once, fsync held
    assert io.entered.wait(10)
    committer.max_events = 10  # the next batch could grow: the interval applies to it
    waiting = committer.submit(records(2, 1), hold=True)  # arrives at t=0, fsync held
    clock.now = 61.0
    io.gate.set()
    first.result(timeout=10)
    # its interval ran out behind the fsync: written now, not 60 s after the writer saw it
    assert waiting.result(timeout=10).count == 1
    committer.close()


def test_submissions_during_an_fsync_do_not_wake_the_busy_writer_and_all_land(gated):
    io, journal = gated
    committer = GroupCommitter(journal, max_events=64)
    first = committer.submit(records(1, 1))
    assert io.entered.wait(10)  # the writer is inside fdatasync, not waiting on the lock
    notified = []
    real_notify = committer._cond.notify
    committer._cond.notify = lambda n=1: (notified.append(n), real_notify(n))
    queued = [committer.submit(records(2 + index, 1)) for index in range(5)]
    assert notified == [] and not any(future.done() for future in queued)
    io.gate.set()
    assert first.result(timeout=10).count == 1
    assert {future.result(timeout=10).count for future in queued} == {5}  # one batch
    committer.close()


def test_held_submissions_wait_for_flush_then_go_as_one_batch(gated):
    io, journal = gated
    io.gate.set()
    committer = GroupCommitter(journal, max_events=64)  # no interval: only flush releases
    tickets = [committer.append(records(seq, 1), hold=True) for seq in (1, 2, 3)]
    assert tickets == [1, 2, 3]
    threading.Event().wait(0.2)  # time enough for a writer that wrongly went ahead
    assert committer.durable == 0 and committer.stats().batches == 0
    committer.flush()
    committer.wait(3, timeout=10)
    assert committer.durable == 3
    assert (committer.stats().batches, committer.stats().largest_batch) == (1, 3)
    committer.close()


def test_a_full_batch_of_held_submissions_is_written_without_flush(gated):
    io, journal = gated
    io.gate.set()
    committer = GroupCommitter(journal, max_events=2)
    committer.append(records(1, 1), hold=True)
    ticket = committer.append(records(2, 1), hold=True)  # the batch is full now
    committer.wait(ticket, timeout=10)  # wait() flushes too, but the writer was woken first
    assert committer.stats().largest_batch == 2
    committer.close()


def test_per_event_commit_never_holds(gated):
    io, journal = gated
    io.gate.set()
    committer = GroupCommitter(journal)  # max_events=1
    assert not committer.holds
    future = committer.submit(records(1, 1), hold=True)
    assert future.result(timeout=10).count == 1  # no flush needed
    committer.close()


def test_completion_fd_wakes_once_a_batch_is_durable_and_when_the_writer_stops(gated):
    import select

    io, journal = gated
    committer = GroupCommitter(journal)
    ticket = committer.append(records(1, 1))
    assert io.entered.wait(10)
    assert select.select([committer.completion_fd], [], [], 0.05)[0] == []  # not durable yet
    io.gate.set()
    assert select.select([committer.completion_fd], [], [], 10)[0]
    committer.drain_completions()
    assert committer.durable == ticket and committer.stopped is None
    io.gate.clear()
    io.entered.clear()
    io.fail_with = errno.EIO
    failed = committer.append(records(2, 1))
    assert io.entered.wait(10)
    io.gate.set()
    assert select.select([committer.completion_fd], [], [], 10)[0]
    assert committer.stopped is not None and committer.durable == ticket < failed
    with pytest.raises(WriterStopped):
        committer.wait(failed, timeout=10)
    committer.close()
