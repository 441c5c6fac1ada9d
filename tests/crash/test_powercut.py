"""The crash model the compaction matrix relies on (tests/crash/powercut.py): what a kill
keeps, what a power cut keeps (cleanly or torn), and that a dead process writes nothing more."""

from __future__ import annotations

import os

import pytest

from tests.crash.powercut import Crash, PowerCutIO
from tests.scratch import scratch_dir


@pytest.fixture
def root():
    return scratch_dir("powercut-")


def _create(io: PowerCutIO, path, data: bytes, sync: bool) -> None:
    fd = io.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    io.write_all_at(fd, data, 0)
    if sync:
        io.fsync(fd)
    io.close(fd)


def test_operations_are_numbered_and_the_crash_comes_before_the_nth(root):
    io = PowerCutIO(crash_at=3)
    io.mkdir(str(root / "d"))
    io.fsync_dir(str(root))
    with pytest.raises(Crash) as caught:
        io.mkdir(str(root / "e"))
    assert caught.value.index == 3 and not (root / "e").exists()
    with pytest.raises(Crash):  # dead: nothing else either, not even a read-only open
        io.open(str(root / "d"), os.O_RDONLY)
    assert [op.kind for op in io.operations] == ["mkdir", "fsync_dir"]


def test_a_kill_keeps_everything_done(root):
    io = PowerCutIO()
    _create(io, root / "a", b"abc", sync=False)
    io.crash("kill", str(root))
    assert (root / "a").read_bytes() == b"abc"


def _synced_then_appended(io: PowerCutIO, path, appended: bytes) -> None:
    """``path`` created with ``12345``, synced with its entry; then ``appended``, unsynced."""
    _create(io, path, b"12345", sync=True)
    io.fsync_dir(str(path.parent))
    fd = io.open(str(path), os.O_WRONLY)
    io.write_all_at(fd, appended, 5)
    io.close(fd)


def test_a_power_cut_keeps_only_synced_bytes_and_synced_entries(root):
    (root / "old").write_bytes(b"durable before")
    io = PowerCutIO()
    _synced_then_appended(io, root / "synced", b"678")
    _create(io, root / "unlisted", b"x", sync=True)  # its directory entry never synced
    io.unlink(str(root / "old"))  # removal never synced
    io.crash("power", str(root))
    assert sorted(os.listdir(root)) == ["old", "synced"]
    assert (root / "synced").read_bytes() == b"12345"
    assert (root / "old").read_bytes() == b"durable before"


def test_a_torn_power_cut_keeps_half_of_the_unsynced_bytes_in_flight(root):
    io = PowerCutIO()
    _synced_then_appended(io, root / "synced", b"6789")
    _create(io, root / "one", b"x", sync=False)
    io.fsync_dir(str(root))  # its entry is durable, its only byte is not
    io.crash("torn", str(root))
    assert (root / "synced").read_bytes() == b"1234567"
    assert (root / "one").read_bytes() == b"x"  # at least one byte of what was in flight


def test_a_power_cut_undoes_unsynced_renames_newest_first(root):
    (root / "CURRENT").write_bytes(b"old authority")
    io = PowerCutIO()
    _create(io, root / "staged", b"new authority", sync=True)
    io.rename_replace(str(root), "staged", "CURRENT")
    io.mkdir(str(root / "d"))
    io.fsync_dir(str(root / "d"))  # another directory's fsync keeps nothing of the root
    io.crash("power", str(root))
    assert sorted(os.listdir(root)) == ["CURRENT"]
    assert (root / "CURRENT").read_bytes() == b"old authority"


def test_a_synced_rename_survives_with_the_bytes_synced_before_it(root):
    io = PowerCutIO()
    _create(io, root / "staged", b"published", sync=True)
    io.fsync_dir(str(root))
    io.rename_noreplace(str(root), "staged", "final")
    io.fsync_dir(str(root))
    io.crash("power", str(root))
    assert os.listdir(root) == ["final"] and (root / "final").read_bytes() == b"published"


def test_only_appends_are_modelled(root):
    io = PowerCutIO()
    _create(io, root / "f", b"abc", sync=False)
    fd = io.open(str(root / "f"), os.O_WRONLY)
    with pytest.raises(AssertionError, match="only grow"):
        io.write_all_at(fd, b"z", 0)
    io.close(fd)
