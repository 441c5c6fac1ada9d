"""The journal writer: bootstrap, batched appends, rotation and sealing, reopen, poisoning."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from tay import _native
from tay.failures import RecoveryRefused, WriterStopped
from tay.storage import layout
from tay.storage.fsio import FaultyIO, RealIO
from tay.storage.journal.writer import (
    MIN_ROTATION_TARGET,
    check_rotation_target,
    init_store,
)
from tay.storage.recovery.recover import recover
from tay.storage.formats.record import decode_stream
from tay.storage.formats.segment_ledger import decode_ledger
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE
from tay.storage.formats.store_marker import decode_store_marker

SMALL_TARGET = 600  # test-only rotation target (below the spec minimum, explicitly allowed)


@pytest.fixture
def data_dir(data_dir):
    """The shared scratch store directory, as the ``str`` the journal API takes."""
    return str(data_dir)


def records(first: int, count: int, size: int = 20) -> list[tuple[int, int, int, bytes]]:
    """``count`` opaque records (type 1, schema 1) starting at sequence ``first``."""
    return [(seq, 1, 1, struct.pack(">Q", seq) * (size // 8)) for seq in range(first, first + count)]


class Collector:
    """A replay consumer that keeps every record it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int, bytes]] = []

    def __call__(self, sequence, rtype, schema, payload) -> None:
        self.seen.append((sequence, rtype, schema, bytes(payload)))


def open_journal(data_dir, *, io=None, target=SMALL_TARGET, durability="sync"):
    collector = Collector()
    recovered = recover(data_dir, consumer=collector, io=io, durability=durability,
                        validated_filesystem=True, rotation_target=target,
                        allow_small_rotation_target_for_tests=True)
    return recovered.journal, collector


def segment_files(data_dir) -> list[Path]:
    return sorted((Path(data_dir) / "segments").glob("*.tay"))


def test_init_creates_the_exact_v1_layout(data_dir):
    store_id = init_store(data_dir, durability="sync", validated_filesystem=True)
    root = Path(data_dir)
    assert sorted(p.name for p in root.iterdir()) == [".tay-owner.lock", "SEGMENT-LEDGER",
                                                      "STORE", "segments"]
    assert decode_store_marker((root / "STORE").read_bytes()) == store_id
    [entry] = decode_ledger((root / "SEGMENT-LEDGER").read_bytes()).entries
    assert (entry.store_id, entry.epoch_id, entry.segment_id, entry.first_sequence) == (
        store_id, bytes(16), 1, 1)
    assert oct((root / ".tay-owner.lock").stat().st_mode & 0o777) == "0o600"
    [segment] = segment_files(data_dir)
    assert segment.name == "00000000000000000001.tay"
    header = segment.read_bytes()
    assert len(header) == HEADER_SIZE and header[:4] == b"TAYS"
    assert struct.unpack(">QQ", header[8:24]) == (1, 1) and header[24:40] == store_id


def test_init_creates_missing_parent_directories(data_dir):
    nested = os.path.join(data_dir, "var", "data")
    init_store(nested, durability="sync", validated_filesystem=True)
    assert sorted(os.listdir(nested)) == [".tay-owner.lock", "SEGMENT-LEDGER", "STORE",
                                          "segments"]


def test_init_refuses_a_directory_with_history_and_changes_nothing(data_dir):
    init_store(data_dir, durability="write")
    before = sorted(os.listdir(data_dir))
    with pytest.raises(RecoveryRefused) as refused:
        init_store(data_dir, durability="write")
    assert refused.value.kind == "argument" and refused.value.reason == "existing_store"
    assert sorted(os.listdir(data_dir)) == before


def test_init_refuses_unrelated_files(data_dir):
    os.makedirs(data_dir)
    Path(data_dir, "notes.txt").write_text("x")
    with pytest.raises(RecoveryRefused, match="existing_store"):
        init_store(data_dir, durability="write")
    assert os.listdir(data_dir) == ["notes.txt"]


@pytest.mark.parametrize(
    ("durability", "validated", "path", "reason"),
    [
        ("sync", False, None, "sync_requires_validated_filesystem"),
        ("sync", True, "/tmp/tay-journal-test", "sync_refuses_volatile_path"),
        ("sync", True, "/dev/shm/tay-journal-test", "sync_refuses_volatile_path"),
        ("fast", True, None, "unknown_durability"),
    ],
)
def test_durability_refusals_name_the_problem(data_dir, durability, validated, path, reason):
    target = path or data_dir
    with pytest.raises(RecoveryRefused) as refused:
        init_store(target, durability=durability, validated_filesystem=validated)
    assert refused.value.kind == "argument" and refused.value.reason == reason
    assert not os.path.exists(target)


def test_rotation_target_range():
    assert check_rotation_target(MIN_ROTATION_TARGET) == MIN_ROTATION_TARGET
    for bad in (MIN_ROTATION_TARGET - 1, 2**30 + 1, SMALL_TARGET):
        with pytest.raises(RecoveryRefused, match="rotation_target"):
            check_rotation_target(bad)
    assert check_rotation_target(SMALL_TARGET, allow_below_minimum_for_tests=True) == SMALL_TARGET


def test_append_reopen_and_replay_the_same_records(data_dir):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    journal, seen = open_journal(data_dir, target=MIN_ROTATION_TARGET)
    assert seen.seen == [] and journal.next_sequence == 1
    written = records(1, 5) + records(6, 1, size=0) + records(7, 30)
    first = journal.append_batch(written[:5])
    journal.sync()
    second = journal.append_batch(written[5:])
    journal.sync()
    assert (first.segment_id, first.offset, first.first_sequence, first.last_sequence) == (1, 44, 1, 5)
    assert second.first_sequence == 6 and second.last_sequence == 36 and second.count == 31
    journal.close()
    journal, seen = open_journal(data_dir, target=MIN_ROTATION_TARGET)
    assert seen.seen == written
    assert journal.next_sequence == 37
    journal.close()


def test_sequences_must_continue_the_journal(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write")
    with pytest.raises(RecoveryRefused) as refused:
        journal.append_batch(records(2, 1))
    assert refused.value.reason == "sequence_discontinuity"
    journal.append_batch(records(1, 1))  # not poisoned: nothing was written
    journal.close()


def test_rotation_seals_before_a_frame_that_would_cross_the_target(data_dir):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    journal, _ = open_journal(data_dir)
    written = records(1, 40, size=48)  # 76-byte frames
    receipt = journal.append_batch(written)  # one batch spanning several rotations
    journal.sync()
    journal.close()
    files = segment_files(data_dir)
    assert len(files) > 3 and receipt.segment_id == 1
    store_id = decode_store_marker(Path(data_dir, "STORE").read_bytes())
    replayed = []
    for index, path in enumerate(files, start=1):
        data = path.read_bytes()
        assert path.name == f"{index:020d}.tay"
        if path != files[-1]:
            assert len(data) <= SMALL_TARGET
            footer = data[-FOOTER_SIZE:]
            assert footer[:4] == b"TAYF"
            _, _, _, _, seg_id, first, last, count, footer_store, seg_crc, _ = struct.unpack(
                ">4sBBHQQQQ16sII", footer)
            frames = decode_stream(data[HEADER_SIZE:-FOOTER_SIZE])
            assert seg_id == index and footer_store == store_id
            assert (first, last, count) == (frames[0].sequence, frames[-1].sequence, len(frames))
            assert seg_crc == _native.crc32c(data[:-FOOTER_SIZE])
            # the next frame would not have fitted: rotation happened just in time
            assert len(data) - FOOTER_SIZE + 76 + FOOTER_SIZE > SMALL_TARGET
        else:
            frames = decode_stream(data[HEADER_SIZE:])
        replayed += [(f.sequence, f.type, f.schema, f.payload) for f in frames]
    assert replayed == written


def test_reopen_after_a_sealed_highest_creates_the_successor(data_dir):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    journal, _ = open_journal(data_dir)
    journal.append_batch(records(1, 7, size=48))
    journal.sync()
    journal._seal()  # a crash between the seal (R2) and the successor's publication (R5)
    journal.close()
    journal, seen = open_journal(data_dir)
    assert [s for s, *_ in seen.seen] == list(range(1, 8))
    assert len(segment_files(data_dir)) == 3 - 1 + 1
    journal.append_batch(records(8, 1))
    journal.sync()
    journal.close()
    _, seen = open_journal(data_dir)
    assert [s for s, *_ in seen.seen] == list(range(1, 9))


def test_write_mode_appends_without_fdatasync(data_dir):
    init_store(data_dir, durability="write")
    io = FaultyIO()
    journal, _ = open_journal(data_dir, io=io, durability="write")
    syncs = io.syncs
    journal.append_batch(records(1, 3))
    journal.sync()
    assert io.syncs == syncs and journal.syncs == 0
    journal.close()


@pytest.mark.parametrize("fault", ["write", "sync"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failed_write_or_sync_poisons_the_journal_for_good(data_dir, fault, code):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    io = FaultyIO(fail_errno=code)
    journal, _ = open_journal(data_dir, io=io)
    journal.append_batch(records(1, 1))
    journal.sync()
    if fault == "write":
        io.fail_write_at = io.writes + 1
    else:
        io.fail_sync_at = io.syncs + 1
    with pytest.raises(WriterStopped) as stopped:
        journal.append_batch(records(2, 1))
        journal.sync()
    assert stopped.value.details.get("reason", stopped.value.reason).endswith("_failed")
    assert stopped.value.extra["errno"] == code
    io.fail_write_at = io.fail_sync_at = None  # even once the fault is gone: never retried
    for call in (lambda: journal.append_batch(records(3, 1)), journal.sync):
        with pytest.raises(WriterStopped) as again:
            call()
        assert again.value is stopped.value
    journal.close()


def test_lock_is_exclusive_while_the_journal_is_open(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write")
    with pytest.raises(RecoveryRefused) as busy:
        open_journal(data_dir, durability="write")
    assert busy.value.kind == "ownership_busy"
    journal.close()
    journal, _ = open_journal(data_dir, durability="write")
    journal.close()


def test_acquire_lock_refuses_a_symlinked_path(data_dir):
    init_store(data_dir, durability="write")
    link = data_dir + "-link"
    os.symlink(data_dir, link)
    try:
        with pytest.raises(RecoveryRefused) as refused:
            layout.acquire_lock(RealIO(), link, create=False, fsync_ancestors=False)
        assert (refused.value.kind, refused.value.reason) == ("ownership_unavailable", "symlink_in_path")
    finally:
        os.unlink(link)


# -- group commit ------------------------------------------------------------------------
from tay.storage.journal.commit import GroupCommitter  # noqa: E402


def test_default_group_commit_is_one_fsync_per_event(data_dir):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    journal, _ = open_journal(data_dir)
    committer = GroupCommitter(journal)
    receipts = [committer.submit(records(seq, 1)).result(timeout=10) for seq in range(1, 6)]
    pair = committer.submit(records(6, 2)).result(timeout=10)  # finish + result: one batch
    committer.close()
    stats = committer.stats()
    assert [r.last_sequence for r in receipts] == [1, 2, 3, 4, 5]
    assert (pair.first_sequence, pair.last_sequence) == (6, 7)
    assert (stats.batches, stats.fsyncs, stats.events, stats.largest_batch) == (6, 6, 7, 2)
    journal.close()


def test_batches_keep_order_and_respect_max_events(data_dir):
    init_store(data_dir, durability="sync", validated_filesystem=True)
    journal, _ = open_journal(data_dir, target=MIN_ROTATION_TARGET)
    committer = GroupCommitter(journal, max_events=4, interval_ms=30)
    futures = [committer.submit(records(seq, 1)) for seq in range(1, 11)]
    futures.append(committer.submit(records(11, 6)))  # bigger than max_events: alone, unsplit
    receipts = [f.result(timeout=10) for f in futures]
    committer.close()
    stats = committer.stats()
    assert stats.events == 16 and stats.batches < 11 and stats.fsyncs == stats.batches
    assert receipts[-1].count == 6 and receipts[-1].first_sequence == 11
    for future, receipt in zip(futures[:10], receipts[:10]):
        assert receipt.count <= 4
    journal.close()
    reopened, seen = open_journal(data_dir, target=MIN_ROTATION_TARGET)
    assert [s for s, *_ in seen.seen] == list(range(1, 17))
    reopened.close()


def test_close_drains_queued_submissions(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write")
    committer = GroupCommitter(journal, max_events=8, interval_ms=200)
    futures = [committer.submit(records(seq, 1)) for seq in range(1, 4)]
    committer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert isinstance(committer.submit(records(4, 1)).exception(timeout=1), WriterStopped)
    journal.close()


def test_group_commit_rejects_bad_settings(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write")
    for kwargs in ({"max_events": 0}, {"interval_ms": -1}):
        with pytest.raises(RecoveryRefused):
            GroupCommitter(journal, **kwargs)
    journal.close()
