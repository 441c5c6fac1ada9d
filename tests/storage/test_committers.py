"""Both committers, the C writer thread (``NativeCommitter``) and the Python one
(``GroupCommitter``), against the same rules: byte-identical segments for the same
submissions (rotations included), durable tickets in order, no acknowledgement before the
batch's fsync, a failed write or fsync stops for good after cutting the segment back, a
changed path stops it, and the journal handed back on close reopens cleanly."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.build_guard import pure_on_purpose
from tests.storage.conftest import FIXTURE_STORE_ID, scratch_path
from tests.storage.sync_gates import SyncGate
from tay.failures import RecoveryRefused, WriterStopped
from tay.storage import layout
from tay.storage.formats.segment_ledger import decode_ledger
from tay.storage.fsio import FaultyIO
from tay.storage.journal.native_commit import (
    NativeCommitter,
    make_committer,
    native_writer_available,
)
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

TARGET = 400  # test-only rotation target: a few frames per segment
# The C writer is part of the C extension: the session refuses to run without it
# (tests/build_guard.py) unless TAY_NATIVE=python asks for the pure twin on purpose.
WITHOUT_C_WRITER = pytest.mark.skipif(
    pure_on_purpose() and not native_writer_available(),
    reason="the C writer is not built and TAY_NATIVE=python was set on purpose")
WRITERS = [pytest.param("python", id="python"), pytest.param("c", id="c", marks=WITHOUT_C_WRITER)]


def payload(seq: int, size: int) -> bytes:
    return (seq.to_bytes(8, "big") * (size // 8 + 1))[:size]


def open_store(root: Path, writer: str, *, max_events=1, interval_ms=0, target=TARGET,
               durability="sync", linger=False, gather_us=0):
    """A fresh store (fixed STORE_ID) at ``root`` and a committer of kind ``writer``."""
    if not root.exists():
        init_store(str(root), durability=durability, validated_filesystem=True,
                   store_id=FIXTURE_STORE_ID)
    io = FaultyIO() if writer == "python" else None  # the Python writer's fault seam
    journal = recover(str(root), consumer=lambda *a: None, io=io, durability=durability,
                      validated_filesystem=True, rotation_target=target,
                      allow_small_rotation_target_for_tests=True).journal
    committer = make_committer(journal, max_events, interval_ms, writer=writer, linger=linger,
                               gather_us=gather_us)
    assert committer.implementation == writer
    return journal, committer


def replay(root: Path) -> list[tuple[int, bytes]]:
    seen: list[tuple[int, bytes]] = []
    journal = recover(str(root), consumer=lambda seq, t, s, p: seen.append((seq, bytes(p))),
                      durability="sync", validated_filesystem=True, rotation_target=TARGET,
                      allow_small_rotation_target_for_tests=True).journal
    journal.close()
    return seen


def segment_bytes(root: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted((root / "segments").glob("*.tay"))]


@pytest.fixture
def root():
    path = scratch_path("committers")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=WRITERS)
def writer(request):
    return request.param


# -- the same bytes ----------------------------------------------------------------------
submissions = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 150), st.booleans()),
                       min_size=1, max_size=25)


@WITHOUT_C_WRITER
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=submissions, max_events=st.sampled_from([1, 2, 4, 64]))
def test_both_writers_produce_identical_segments(plan, max_events):
    roots = {kind: scratch_path(f"twin-{kind}") for kind in ("python", "c")}
    try:
        for kind, root in roots.items():
            journal, committer = open_store(root, kind, max_events=max_events)
            sequence, last = 1, 0
            for count, size, hold in plan:
                records = [(seq, 1 + seq % 3, 1, payload(seq, size))
                           for seq in range(sequence, sequence + count)]
                last = committer.append(records, hold)
                sequence += count
                if not hold:
                    committer.flush()
            committer.wait(last, timeout=30)
            assert committer.durable == last
            committer.close()
            assert journal.next_sequence == sequence
            journal.close()
        python_bytes, c_bytes = (segment_bytes(roots[kind]) for kind in ("python", "c"))
        assert len(python_bytes) > 0 and python_bytes == c_bytes
        ledgers = [(roots[kind] / "SEGMENT-LEDGER").read_bytes() for kind in ("python", "c")]
        assert len(ledgers[0]) == 64 * len(python_bytes) and ledgers[0] == ledgers[1]
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


def test_every_segment_a_rotation_creates_is_in_the_ledger(writer, root):
    """Item 2 of issue 17 holds on both writers: a deleted newest segment is refused."""
    journal, committer = open_store(root, writer, max_events=4)
    committer.wait(committer.append([(seq, 1, 1, payload(seq, 100)) for seq in range(1, 13)]),
                   timeout=30)
    committer.close()
    journal.close()
    segments = sorted((root / "segments").glob("*.tay"))
    ledger = decode_ledger((root / "SEGMENT-LEDGER").read_bytes())
    assert [e.segment_id for e in ledger.entries] == list(range(1, len(segments) + 1))
    assert len(segments) > 2
    segments[-1].unlink()
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(root), consumer=lambda *a: None, activate=False)
    assert (refused.value.reason, refused.value.path) == ("missing_segment", str(segments[-1]))


def test_tickets_become_durable_in_order_with_receipts(writer, root):
    journal, committer = open_store(root, writer, max_events=4)
    futures = [committer.submit([(seq, 1, 1, payload(seq, 60))]) for seq in range(1, 21)]
    receipts = [future.result(timeout=30) for future in futures]
    assert committer.durable == 20
    assert [r.first_sequence <= seq <= r.last_sequence for seq, r in
            zip(range(1, 21), receipts)] == [True] * 20
    assert all(r.count <= 4 and r.durability == "sync" for r in receipts)
    assert len({r.segment_id for r in receipts}) > 1  # the batches crossed rotations
    committer.close()
    journal.close()
    assert [seq for seq, _ in replay(root)] == list(range(1, 21))


def test_discontinuous_sequences_are_refused_without_queuing(writer, root):
    journal, committer = open_store(root, writer)
    with pytest.raises(RecoveryRefused) as refused:
        committer.append([(5, 1, 1, b"x")])
    assert refused.value.reason == "sequence_discontinuity"
    committer.wait(committer.append([(1, 1, 1, b"ok")]), timeout=10)
    committer.close()
    journal.close()
    assert replay(root) == [(1, b"ok")]


def test_no_acknowledgement_before_the_fsync_returns(writer, root):
    journal, committer = open_store(root, writer)
    gate = SyncGate(committer, journal)
    ticket = committer.append([(1, 1, 1, b"held")])
    assert gate.entered()
    assert committer.durable == 0  # written, not synced: not durable
    with pytest.raises(TimeoutError):
        committer.wait(ticket, timeout=0.05)
    gate.release()
    committer.wait(ticket, timeout=10)
    committer.close()
    journal.close()


def stop_on_a_failed_sync(committer, gate: SyncGate, sequence: int) -> None:
    """A batch (event ``sequence``) whose fdatasync fails with EIO while ``gate`` holds it:
    the writer stops for good, and a wait for that batch says so."""
    failed = committer.append([(sequence, 1, 1, b"lost")])
    assert gate.entered()
    gate.fail_held_sync(errno.EIO)
    gate.release()
    with pytest.raises(WriterStopped):
        committer.wait(failed, timeout=10)


def test_completed_drains_the_fd_and_reads_durable_then_minus_one_once_stopped(writer, root):
    import select

    journal, committer = open_store(root, writer)
    assert committer.completed() == 0  # nothing signalled: no error, nothing durable
    gate = SyncGate(committer, journal)
    ticket = committer.append([(1, 1, 1, b"held")])
    assert gate.entered()
    assert committer.completed() == 0  # written, not synced: not durable
    gate.release()
    assert select.select([committer.completion_fd], [], [], 10)[0]
    assert committer.completed() == ticket
    assert select.select([committer.completion_fd], [], [], 0)[0] == []  # drained
    gate.arm()
    stop_on_a_failed_sync(committer, gate, 2)
    assert committer.completed() == -1
    assert committer.stopped is not None and committer.durable == ticket
    committer.close()
    journal.close()


def test_the_completion_fd_is_signalled_once_until_the_loop_looks(writer, root):
    """Batches made durable while the fd is still unread do not write to it again (one
    eventfd write per loop wake-up, not per batch); ``completed()`` re-arms the signal and
    sees every batch, and a stop after a skipped signal is still seen."""
    import select

    journal, committer = open_store(root, writer)
    tickets = []
    for seq in (1, 2, 3):  # the writer signals batch n before it takes batch n + 1
        tickets.append(committer.append([(seq, 1, 1, payload(seq, 20))]))
        committer.wait(tickets[-1], timeout=10)
    if hasattr(os, "eventfd"):  # the counter: how many writes the three batches made
        assert int.from_bytes(os.read(committer.completion_fd, 8), "little") == 1
    assert committer.completed() == tickets[-1]
    assert select.select([committer.completion_fd], [], [], 0)[0] == []
    fourth = committer.append([(4, 1, 1, payload(4, 20))])  # re-armed: signalled again
    assert select.select([committer.completion_fd], [], [], 10)[0]
    committer.wait(fourth, timeout=10)
    assert committer.completed() == fourth
    committer.drain_completions()  # a drain re-arms it too
    fifth = committer.append([(5, 1, 1, payload(5, 20))])
    assert select.select([committer.completion_fd], [], [], 10)[0]
    committer.wait(fifth, timeout=10)
    # unread: the stop that follows is not signalled again, the look still finds it
    stop_on_a_failed_sync(committer, SyncGate(committer, journal), 6)
    assert select.select([committer.completion_fd], [], [], 0)[0]
    assert committer.completed() == -1
    assert committer.stopped is not None and committer.durable == fifth
    committer.close()
    journal.close()


def test_a_reader_that_looks_at_every_wake_up_sees_every_batch(writer, root):
    """The loop's way (look only when the fd is readable) while batches keep completing: no
    signal is lost between a look's read of the fd and its re-arm (a skipped signal must
    always leave a look to come that sees its batch)."""
    import select
    import threading

    journal, committer = open_store(root, writer, durability="write", target=64 << 20)
    count = 4000
    last: list[int] = []

    def produce() -> None:
        for seq in range(1, count + 1):
            ticket = committer.append([(seq, 1, 1, payload(seq, 16))])
        last.append(ticket)

    producer = threading.Thread(target=produce)
    producer.start()
    seen = 0
    while not last or seen < last[0]:
        if not select.select([committer.completion_fd], [], [], 5)[0]:
            break  # nothing to wake the loop though batches were made durable
        seen = committer.completed()
    producer.join()
    assert seen == last[0] == committer.durable
    committer.close()
    journal.close()


@pytest.mark.parametrize("fault", ["write", "sync"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_fault_stops_the_writer_for_good(writer, fault, code, root):
    journal, committer = open_store(root, writer, max_events=2)
    acked = [committer.submit([(1, 1, 1, payload(1, 30))]).result(timeout=10)]
    faults = {"fail_write_at" if fault == "write" else "fail_sync_at":
              io_count(committer, journal, fault + "s") + 1, "fail_errno": code}
    inject(committer, journal, **faults)
    futures = [committer.submit([(seq, 1, 1, payload(seq, 30))]) for seq in range(2, 7)]
    for future in futures:
        error = future.exception(timeout=10)
        assert isinstance(error, WriterStopped) and error.extra["errno"] == code
        assert error.reason == ("append_failed" if fault == "write" else "fdatasync_failed")
    assert committer.stopped is not None
    later = committer.submit([(7, 1, 1, b"later")])
    assert isinstance(later.exception(timeout=10), WriterStopped)
    committer.close()
    journal.close()
    assert [seq for seq, _ in replay(root)][:1] == [r.first_sequence for r in acked]


@pytest.mark.parametrize("short", [1, 27, 61])
def test_a_short_write_is_cut_back_and_the_store_reopens(writer, short, root):
    journal, committer = open_store(root, writer, target=1 << 20)
    committer.wait(committer.append([(seq, 1, 1, payload(seq, 20)) for seq in (1, 2, 3)]), 10)
    committed = (root / "segments" / "00000000000000000001.tay").stat().st_size
    inject(committer, journal, fail_write_at=io_count(committer, journal, "writes") + 1,
           fail_errno=errno.ENOSPC, short_write_bytes=short)
    ticket = committer.append([(4, 1, 1, payload(4, 40))])
    with pytest.raises(WriterStopped) as stopped:
        committer.wait(ticket, timeout=10)
    report = stopped.value.report()
    assert report["reason"] == "append_failed" and report["errno"] == errno.ENOSPC
    assert (report["cut_back_to"], report["cut_back_bytes"]) == (committed, short)
    committer.close()
    journal.close()
    assert (root / "segments" / "00000000000000000001.tay").stat().st_size == committed
    assert [seq for seq, _ in replay(root)] == [1, 2, 3]


def test_a_second_link_to_the_lock_stops_the_writer(writer, root):
    journal, committer = open_store(root, writer)
    committer.wait(committer.append([(1, 1, 1, b"one")]), timeout=10)
    extra = root / "second-lock-link"
    os.link(root / layout.LOCK_NAME, extra)
    try:
        ticket = committer.append([(2, 1, 1, b"two")])
        with pytest.raises(WriterStopped) as stopped:
            committer.wait(ticket, timeout=10)
        assert (stopped.value.kind, stopped.value.reason) == ("changed_view", "path_changed")
        assert stopped.value.extra["links"] == 2
    finally:
        committer.close()
        journal.close()
        extra.unlink()


def test_the_path_check_follows_the_active_segment_across_rotations(writer, root):
    """After rotations the check looks at the new active segment's name (the C writer
    formats it once per segment): replacing that file by a copy stops the writer, naming
    it; the older segments' names are no longer checked."""
    journal, committer = open_store(root, writer, max_events=4)
    committer.wait(committer.append([(seq, 1, 1, payload(seq, 100)) for seq in range(1, 13)]),
                   timeout=30)
    segments = sorted((root / "segments").glob("*.tay"))
    assert len(segments) > 2
    segments[0].rename(root / "first-elsewhere")  # no longer the active one: not checked
    committer.wait(committer.append([(13, 1, 1, payload(13, 10))]), timeout=30)
    active = sorted((root / "segments").glob("*.tay"))[-1]
    shutil.copyfile(active, root / "copy")
    os.rename(root / "copy", active)
    ticket = committer.append([(14, 1, 1, payload(14, 10))])
    try:
        with pytest.raises(WriterStopped) as stopped:
            committer.wait(ticket, timeout=10)
        assert (stopped.value.kind, stopped.value.reason) == ("changed_view", "path_changed")
        assert os.path.basename(stopped.value.report()["path"]) == active.name
    finally:
        committer.close()
        journal.close()


def test_close_hands_the_journal_back_for_direct_appends(writer, root):
    journal, committer = open_store(root, writer)
    for seq in range(1, 30):
        committer.append([(seq, 1, 1, payload(seq, 50))])
    committer.close()  # drains what is queued
    assert committer.durable == 29 and journal.next_sequence == 30
    journal.append_batch([(30, 1, 1, b"direct")])
    journal.sync()
    journal.close()
    assert [seq for seq, _ in replay(root)] == list(range(1, 31))


def test_held_submissions_wait_for_flush(writer, root):
    journal, committer = open_store(root, writer, max_events=64)
    tickets = [committer.append([(seq, 1, 1, b"h")], hold=True) for seq in (1, 2, 3)]
    with pytest.raises(TimeoutError):  # wait() would flush; poll durable instead
        deadline_poll(lambda: committer.durable >= 3, 0.2)
    committer.flush()
    deadline_poll(lambda: committer.durable == tickets[-1], 10)
    assert committer.stats().batches == 1
    committer.close()
    journal.close()


# -- helpers -------------------------------------------------------------------------------
def deadline_poll(done, seconds: float) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.005)


def io_count(committer, journal, counter: str) -> int:
    """Writes or syncs issued so far by either writer (the fault seams count the same)."""
    if isinstance(committer, NativeCommitter):
        return committer.io_counts()[counter]
    return getattr(journal.io, counter)


def inject(committer, journal, **faults) -> None:
    """Fail from the given write/sync on, in the C seam or through a FaultyIO."""
    if isinstance(committer, NativeCommitter):
        committer._writer.test_faults(**faults)
        return
    for name, value in faults.items():
        setattr(journal.io, name, value)


@WITHOUT_C_WRITER
def test_the_c_writer_times_each_step_of_its_batches(root):
    started = time.monotonic_ns()  # before the thread starts: its first wait is counted
    journal, committer = open_store(root, "c")
    for seq in range(1, 7):
        if seq == 6:
            # the writer goes back for the next batch right after each durable one, and a
            # busy machine can let every append land before it waits: leave it idle once
            time.sleep(0.05)
        committer.append([(seq, 1, 1, payload(seq, 20))])
        committer.wait(seq, timeout=10)
        # a durable batch's steps are counted when it becomes durable
        assert committer.phases()["batches"] == committer.stats().batches == seq
    committer.close()
    elapsed = time.monotonic_ns() - started
    phases = committer.phases()  # kept from the closed thread
    assert phases["batches"] == 6
    for step in ("write_ns", "verify_ns", "sync_ns", "check_ns", "publish_ns"):
        assert phases[step] > 0, step
    assert phases["idle_ns"] > 0 and phases["held_ns"] == 0  # max_events 1 never holds
    steps = ("idle_ns", "take_ns", "write_ns", "verify_ns", "sync_ns", "check_ns", "publish_ns")
    assert sum(phases[step] for step in steps) <= elapsed  # one thread's time, no overlap
    journal.close()


@WITHOUT_C_WRITER
def test_the_c_writer_counts_batch_histograms_in_the_given_buckets(root):
    journal, committer = open_store(root, "c", max_events=4)
    committer.observe((0.000001, 10.0), (1, 2, 4))
    for seq in range(1, 11):
        committer.append([(seq, 1, 1, payload(seq, 20))], hold=True)
    committer.wait(10, timeout=10)
    observed = committer.observations()
    batches = committer.stats().batches
    assert observed["batches"] == batches and sum(observed["events"][0]) == batches
    assert observed["events"][1] == 10  # the sum of events per batch
    assert observed["events"][0][3] == 0  # no batch above max_events
    assert sum(observed["sync"][0]) == batches and observed["sync"][0][2] == 0  # all < 10 s
    assert observed["sync"][1] > 0 and observed["write"][1] > 0
    committer.close()
    journal.close()


def test_both_writers_append_to_a_store_v2_epoch_tail_and_record_it(writer, root):
    """The journal of an epoch: the C writer pins epochs/e-<id>/segments (not a v1
    segments/) and records its successors under the epoch's id."""
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.recovery.recover import TableConsumer
    from tay.storage.v2 import Retention

    init_store(str(root), durability="write", store_id=FIXTURE_STORE_ID)
    compact_offline(str(root), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)
    recovered = recover(str(root), consumer=TableConsumer(), durability="write",
                        rotation_target=TARGET, allow_small_rotation_target_for_tests=True)
    journal, epoch_id = recovered.journal, recovered.view.epoch_id
    committer = make_committer(journal, 4, 0, writer=writer)
    assert committer.implementation == writer
    first = journal.next_sequence
    committer.wait(committer.append([(seq, 8, 1, payload(seq, 100))
                                     for seq in range(first, first + 8)]), timeout=30)
    assert committer.stopped is None
    committer.close()
    journal.close()
    tail = sorted(Path(journal.segments_dir).glob("*.tay"))
    ledger = decode_ledger((root / "SEGMENT-LEDGER").read_bytes())
    assert ledger.highest(epoch_id).segment_id == int(tail[-1].name[:20]) > 2


@WITHOUT_C_WRITER
def test_a_batch_made_durable_while_receipts_are_fetched_still_resolves(data_dir):
    """The C committer's future resolver read ``durable`` after fetching receipts: a batch
    finished in between counted as durable without its receipt (RuntimeError in the
    resolver thread, the future never resolved). Seen with a real-time writer thread."""
    journal, committer = open_store(data_dir, "c")
    writer = committer._writer
    fetch = writer.new_receipts
    raced: list[bool] = []

    def fetch_while_the_next_batch_lands() -> list:
        receipts = fetch()
        if not raced:
            raced.append(True)
            writer.wait(2, None)  # the second submission becomes durable meanwhile
        return receipts

    writer.new_receipts = fetch_while_the_next_batch_lands
    try:
        futures = [committer.submit([(seq, 1, 1, payload(seq, 30))]) for seq in (1, 2)]
        assert [f.result(timeout=10).last_sequence for f in futures] == [1, 2]
        assert raced
    finally:
        committer.close()
        journal.close()
