"""A failed or short write never leaves a torn tail: the writer cuts the active segment back
to its size at the last barrier before it stops (docs/journal.md, "Failures poison the
journal"). Through the FaultyIO seam, for both native twins: a C writer must pass the same
tests (``write_all_at`` of the twin under test does the real partial write).
"""

from __future__ import annotations

import errno
import os

import pytest

from tests.storage.test_crash import faulty_store, native, payload, replay_all  # noqa: F401
from tay.failures import WriterStopped
from tay.storage.fsio import RealIO
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE
from tay.storage.journal.commit import GroupCommitter
from tay.storage.recovery.recover import recover


def segment_path(root, segment_id: int = 1):
    return root / "segments" / f"{segment_id:020d}.tay"


def acknowledge(journal, first: int, count: int, size: int = 20) -> list[tuple[int, bytes]]:
    batch = [(seq, 1, 1, payload(seq, size)) for seq in range(first, first + count)]
    journal.append_batch(batch)
    journal.sync()
    return [(seq, data) for seq, _, _, data in batch]


def restart_appends(root, native, next_sequence: int) -> None:
    """The store opens for writing again and takes the next sequence."""
    journal = recover(str(root), consumer=lambda *a: None, io=RealIO(native), durability="sync",
                      validated_filesystem=True).journal
    try:
        journal.append_batch([(next_sequence, 1, 1, b"after")])
        journal.sync()
    finally:
        journal.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("short", [1, 3, 27, 61])
def test_short_write_is_cut_back_and_restart_succeeds(native, code, short, data_dir):
    io, journal = faulty_store(data_dir, native, fail_errno=code, short_write_bytes=short)
    acked = acknowledge(journal, 1, 3)
    committed = os.path.getsize(segment_path(data_dir))
    io.fail_write_at = io.writes + 1
    with pytest.raises(WriterStopped) as stopped:
        journal.append_batch([(4, 1, 1, payload(4, 40))])  # a 68-byte frame, cut short
    report = stopped.value.report()
    assert report["errno"] == code and report["reason"] == "append_failed"
    assert (report["cut_back_to"], report["cut_back_bytes"]) == (committed, short)
    assert os.path.getsize(segment_path(data_dir)) == committed
    with pytest.raises(WriterStopped):  # poisoned for good
        journal.append_batch([(4, 1, 1, b"again")])
    journal.close()
    assert replay_all(data_dir, native) == acked
    restart_appends(data_dir, native, 4)
    assert [seq for seq, _ in replay_all(data_dir, native)] == [1, 2, 3, 4]


def test_cut_back_removes_the_whole_unacknowledged_batch(native, data_dir):
    """Complete frames of the failing batch written before the short one go too: the cut is
    to the last barrier, not to the last complete frame."""
    io, journal = faulty_store(data_dir, native, fail_errno=errno.ENOSPC, short_write_bytes=10)
    acked = acknowledge(journal, 1, 2)
    committed = os.path.getsize(segment_path(data_dir))
    journal.append_batch([(3, 1, 1, b"x" * 10)])  # written, never synced
    io.fail_write_at = io.writes + 1
    with pytest.raises(WriterStopped) as stopped:
        journal.append_batch([(4, 1, 1, b"y" * 10)])
    assert stopped.value.extra["cut_back_bytes"] == 38 + 10
    assert os.path.getsize(segment_path(data_dir)) == committed
    journal.close()
    assert replay_all(data_dir, native) == acked


def test_failed_sync_cuts_back_the_unsynced_batch(native, data_dir):
    io, journal = faulty_store(data_dir, native, fail_errno=errno.EIO)
    acked = acknowledge(journal, 1, 2)
    committed = os.path.getsize(segment_path(data_dir))
    journal.append_batch([(3, 1, 1, b"z" * 30)])
    io.fail_sync_at = io.syncs + 1
    with pytest.raises(WriterStopped) as stopped:
        journal.sync()
    # the cut-back's own fsync fails too (the injected fault persists): reported, not hidden
    assert stopped.value.extra["cut_back_errno"] == errno.EIO
    assert os.path.getsize(segment_path(data_dir)) == committed  # the truncate itself ran
    journal.close()
    assert replay_all(data_dir, native) == acked


def test_short_write_in_a_successor_cuts_back_to_its_header(native, data_dir):
    """A batch that spans a rotation: the sealed segment keeps its complete frames (sealed
    and fsynced before the successor existed), the successor is cut back to its header."""
    io, journal = faulty_store(data_dir, native, fail_errno=errno.ENOSPC, short_write_bytes=5)
    acked = acknowledge(journal, 1, 1)
    fails_at = {"n": None}
    real_rotate = journal._create_successor

    def rotate_then_arm():  # the next write after the rotation is the successor's first
        real_rotate()
        io.fail_write_at = io.writes + 1
        fails_at["n"] = journal.segment_id

    journal._create_successor = rotate_then_arm
    batch = [(seq, 1, 1, b"r" * 100) for seq in range(2, 8)]
    with pytest.raises(WriterStopped) as stopped:
        journal.append_batch(batch)
    successor = segment_path(data_dir, fails_at["n"])
    assert stopped.value.extra["cut_back_to"] == HEADER_SIZE
    assert os.path.getsize(successor) == HEADER_SIZE
    journal.close()
    seen = replay_all(data_dir, native)
    assert seen[:1] == acked
    assert [seq for seq, _ in seen] == list(range(1, len(seen) + 1))


def test_short_footer_write_leaves_an_active_segment(native, data_dir):
    io, journal = faulty_store(data_dir, native, fail_errno=errno.ENOSPC,
                               short_write_bytes=FOOTER_SIZE // 2)
    acked = acknowledge(journal, 1, 2, size=80)  # 2 x 108 bytes: the next frame rotates
    committed = os.path.getsize(segment_path(data_dir))
    io.fail_write_at = io.writes + 1  # the footer (R1) is the next write
    with pytest.raises(WriterStopped) as stopped:
        journal.append_batch([(3, 1, 1, payload(3, 80))])
    assert stopped.value.extra["cut_back_bytes"] == FOOTER_SIZE // 2
    assert os.path.getsize(segment_path(data_dir)) == committed
    assert not segment_path(data_dir, 2).exists()
    journal.close()
    assert replay_all(data_dir, native) == acked
    restart_appends(data_dir, native, 3)


def test_committer_after_a_short_write_restart_loses_nothing_acknowledged(native, data_dir):
    io, journal = faulty_store(data_dir, native, fail_errno=errno.ENOSPC, short_write_bytes=33)
    committer = GroupCommitter(journal, max_events=4, interval_ms=5)
    acked = []
    for seq in range(1, 6):
        committer.submit([(seq, 1, 1, payload(seq, 50))]).result(timeout=10)
        acked.append((seq, payload(seq, 50)))
    io.fail_write_at = io.writes + 1
    failed = [committer.submit([(seq, 1, 1, payload(seq, 50))]) for seq in range(6, 10)]
    for future in failed:
        assert isinstance(future.exception(timeout=10), WriterStopped)
    committer.close()
    journal.close()
    assert replay_all(data_dir, native) == acked
    restart_appends(data_dir, native, 6)
