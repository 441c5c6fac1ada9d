"""Power loss and I/O faults through FaultyIO, for both native twins.

Power loss keeps only what was fsynced (plus, optionally, a torn prefix of the newest
unsynced write). After any crash, recovery either returns every acknowledged record (and
possibly some unacknowledged ones, as a prefix of what was written), or, when a torn
frame is left at the tail, refuses with ``incomplete_tail`` without touching the disk.
"""

from __future__ import annotations

import errno
import shutil
from concurrent.futures import wait
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.build_guard import c_twin
from tests.storage.conftest import scratch_path
from tay._native import pure
from tay.failures import RecoveryRefused, WriterStopped
from tay.storage.journal.commit import GroupCommitter
from tay.storage.fsio import FaultyIO, RealIO
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

TARGET = 400  # test-only rotation target so crashes also hit seals and successors


@pytest.fixture(params=["python", "c"])
def native(request):
    return pure if request.param == "python" else c_twin()


def payload(seq: int, size: int) -> bytes:
    return (seq.to_bytes(8, "big") * (size // 8 + 1))[:size]


def faulty_store(root: Path, native, **faults):
    """A new sync store at ``root`` and its journal writing through a ``FaultyIO``."""
    init_store(str(root), durability="sync", validated_filesystem=True, io=RealIO(native))
    io = FaultyIO(native, **faults)
    journal = recover(str(root), consumer=lambda *a: None, io=io, durability="sync",
                      validated_filesystem=True, rotation_target=TARGET,
                      allow_small_rotation_target_for_tests=True).journal
    return io, journal


def replay_all(root: Path, native) -> list[tuple[int, bytes]]:
    seen: list[tuple[int, bytes]] = []
    recover(str(root), consumer=lambda s, t, sc, p: seen.append((s, bytes(p))),
            io=RealIO(native), activate=False)
    return seen


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 90), min_size=1, max_size=5)),
        st.tuples(st.just("sync"), st.none()),
    ),
    min_size=1, max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, torn=st.integers(0, 120))
def test_crash_keeps_every_acknowledged_record(native, ops, torn):
    root = scratch_path("crash")
    try:
        io, journal = faulty_store(root, native)
        written: list[tuple[int, bytes]] = []
        acknowledged = 0
        for kind, sizes in ops:
            if kind == "append":
                batch = [(len(written) + i + 1, 1, 1, payload(len(written) + i + 1, n))
                         for i, n in enumerate(sizes)]
                journal.append_batch(batch)
                written += [(seq, data) for seq, _, _, data in batch]
            else:
                journal.sync()
                acknowledged = len(written)
        io.crash(torn_bytes=torn)
        try:
            seen = replay_all(root, native)
        except RecoveryRefused as refused:
            assert refused.kind == "incomplete_tail" and torn > 0
            assert len(written) > acknowledged  # only an unacknowledged write can be torn
            return
        assert len(seen) >= acknowledged
        assert seen == written[: len(seen)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_torn_unsynced_frame_is_refused_not_repaired(native, data_dir):
    root = data_dir
    io, journal = faulty_store(root, native)
    journal.append_batch([(1, 1, 1, b"a" * 20)])
    journal.sync()
    journal.append_batch([(2, 1, 1, b"b" * 20)])  # never synced
    io.crash(torn_bytes=30)
    segment = root / "segments" / f"{1:020d}.tay"
    before = segment.read_bytes()
    with pytest.raises(RecoveryRefused) as refused:
        replay_all(root, native)
    assert (refused.value.kind, refused.value.reason) == ("incomplete_tail", "incomplete_record")
    assert refused.value.offset == 44 + 48
    assert segment.read_bytes() == before
    io.crash()  # without the torn prefix the unsynced record is simply gone


def test_unsynced_successor_directory_entry_is_lost_cleanly(native, data_dir):
    root = data_dir
    io, journal = faulty_store(root, native)
    batch = [(s, 1, 1, b"c" * 60) for s in range(1, 8)]  # crosses several rotations
    journal.append_batch(batch)
    journal.sync()
    io.crash()
    assert [s for s, _ in replay_all(root, native)] == list(range(1, 8))


@pytest.mark.parametrize("fault", ["write", "sync"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_fault_fails_every_pending_and_later_submission(native, fault, code, data_dir):
    root = data_dir
    io, journal = faulty_store(root, native, fail_errno=code)
    committer = GroupCommitter(journal, max_events=2, interval_ms=20)
    assert committer.submit([(1, 1, 1, b"ok")]).result(timeout=10).last_sequence == 1
    if fault == "write":
        io.fail_write_at = io.writes + 1
    else:
        io.fail_sync_at = io.syncs + 1
    futures = [committer.submit([(seq, 1, 1, b"x")]) for seq in range(2, 7)]
    wait(futures, timeout=10)
    for future in futures:
        error = future.exception(timeout=0)
        assert isinstance(error, WriterStopped) and error.extra["errno"] == code
    later = committer.submit([(7, 1, 1, b"y")])
    assert isinstance(later.exception(timeout=1), WriterStopped)
    committer.close()
    journal.close()
    assert [s for s, _ in replay_all(root, native)][:1] == [1]
