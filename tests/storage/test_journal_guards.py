"""The journal's safety checks: the no-replace rename probe (§2.9 lock step 4) and the
per-batch re-check that the store's paths still name the inodes held (§2.9 append step 4)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from tay.failures import RecoveryRefused, WriterStopped
from tay.storage import layout
from tay.storage.journal.commit import GroupCommitter
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover
from tests.storage.test_journal import data_dir, open_journal, records  # noqa: F401 (fixture)


class RenameIO(RealIO):
    """RealIO whose no-replace rename misbehaves the way a filesystem without it would."""

    def __init__(self, behaviour: str) -> None:
        super().__init__()
        self.behaviour = behaviour
        self.renames = 0

    def rename_noreplace(self, directory: str, source: str, target: str) -> None:
        self.renames += 1
        if self.behaviour == "replaces":
            os.rename(os.path.join(directory, source), os.path.join(directory, target))
        elif self.behaviour in ("ENOSYS", "EINVAL", "EPERM"):
            code = getattr(errno, self.behaviour)
            raise OSError(code, os.strerror(code))
        else:
            super().rename_noreplace(directory, source, target)


def leftover_names(directory: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def test_probe_accepts_this_filesystem_and_leaves_nothing_behind(data_dir):
    os.makedirs(data_dir)
    io = RenameIO("real")
    layout.probe_noreplace_rename(io, data_dir)
    assert io.renames == 1
    assert os.listdir(data_dir) == []


@pytest.mark.parametrize("behaviour, reason", [
    ("ENOSYS", "rename_noreplace_unsupported"),
    ("EINVAL", "rename_noreplace_unsupported"),
    ("EPERM", "rename_noreplace_probe_failed"),
    ("replaces", "rename_noreplace_replaced_target"),
])
def test_init_refuses_a_directory_without_no_replace_rename(data_dir, behaviour, reason):
    with pytest.raises(RecoveryRefused) as caught:
        init_store(data_dir, validated_filesystem=True, io=RenameIO(behaviour))
    assert (caught.value.kind, caught.value.reason) == ("unsupported_physical", reason)
    assert caught.value.path == os.path.abspath(data_dir)
    # refused at lock time: nothing was published and the probe files are gone
    assert sorted(os.listdir(data_dir)) == [layout.LOCK_NAME]


def test_activation_probes_before_the_session_writes(data_dir):
    init_store(data_dir, validated_filesystem=True)
    with pytest.raises(RecoveryRefused) as caught:
        recover(data_dir, io=RenameIO("ENOSYS"), validated_filesystem=True)
    assert caught.value.reason == "rename_noreplace_unsupported"
    assert leftover_names(data_dir) == []
    journal, _ = open_journal(data_dir)  # a healthy reopen still works: nothing was changed
    journal.close()


def swap_root(root: str) -> None:
    os.rename(root, root + ".old")
    shutil.copytree(root + ".old", root)


def swap_segments(root: str) -> None:
    segments = os.path.join(root, "segments")
    os.rename(segments, segments + ".old")
    shutil.copytree(segments + ".old", segments)


def swap_active_segment(root: str) -> None:
    active = sorted(Path(root, "segments").glob("*.tay"))[-1]
    shutil.copyfile(active, str(active) + ".copy")
    os.rename(str(active) + ".copy", active)


def swap_lock(root: str) -> None:
    lock = os.path.join(root, layout.LOCK_NAME)
    shutil.copyfile(lock, lock + ".copy")
    os.rename(lock + ".copy", lock)


def link_lock(root: str) -> None:
    os.link(os.path.join(root, layout.LOCK_NAME), os.path.join(root, "second-name"))


def remove_segments_dir(root: str) -> None:
    os.rename(os.path.join(root, "segments"), os.path.join(root, "elsewhere"))


@pytest.mark.parametrize("change", [swap_root, swap_segments, swap_active_segment, swap_lock,
                                    link_lock, remove_segments_dir])
@pytest.mark.parametrize("durability", ["sync", "write"])
def test_a_changed_path_stops_the_writer_before_the_acknowledgement(data_dir, change, durability):
    init_store(data_dir, validated_filesystem=True)
    journal, _ = open_journal(data_dir, durability=durability)
    committer = GroupCommitter(journal)
    assert committer.submit(records(1, 1)).result(timeout=10).last_sequence == 1
    change(journal.root)
    failed = committer.submit(records(2, 1))
    with pytest.raises(WriterStopped) as caught:
        failed.result(timeout=10)
    assert (caught.value.kind, caught.value.reason) == ("changed_view", "path_changed")
    with pytest.raises(WriterStopped):  # poisoned for good
        committer.submit(records(3, 1)).result(timeout=10)
    committer.close()
    journal.close()
    for suffix in (".old",):
        shutil.rmtree(journal.root + suffix, ignore_errors=True)


def test_unchanged_paths_pass_the_check_across_rotations(data_dir):
    init_store(data_dir, validated_filesystem=True)
    journal, _ = open_journal(data_dir)
    for first in range(1, 60, 3):
        journal.append_batch(records(first, 3))
        journal.sync()
    assert journal.segment_id > 2  # the check followed the new active segment each time
    journal.close()


def test_seal_refuses_a_segment_whose_bytes_changed(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write", target=16_777_352)
    journal.append_batch(records(1, 40, size=40_000))  # > 1 MiB: the CRC re-check reads pieces
    active = Path(data_dir, "segments", f"{1:020d}.tay")
    with open(active, "r+b") as handle:  # same size, one payload byte different
        handle.seek(1_500_000)
        byte = handle.read(1)
        handle.seek(1_500_000)
        handle.write(bytes([byte[0] ^ 1]))
    with pytest.raises(WriterStopped) as caught:
        journal._guard(journal._rotate)
    assert caught.value.extra.get("errno") == errno.EIO
    assert not active.read_bytes()[-64:].startswith(b"TAYF")  # no footer written
    journal.close()


def test_seal_accepts_an_unchanged_multi_piece_segment(data_dir):
    init_store(data_dir, durability="write")
    journal, _ = open_journal(data_dir, durability="write", target=16_777_352)
    journal.append_batch(records(1, 40, size=40_000))
    journal._guard(journal._rotate)
    journal.close()
    first = Path(data_dir, "segments", f"{1:020d}.tay").read_bytes()
    assert first[-64:].startswith(b"TAYF")
