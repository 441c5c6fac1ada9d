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


class _ReusedNumbers:
    """``os`` as tests/crash/powercut.py sees it, on a file system that hands a freed inode
    number to the next file it creates (ext4 with a journal takes the lowest free number
    of the directory's group at once): ``alias`` maps a real (st_dev, st_ino) to the one
    its stat results report."""

    def __init__(self) -> None:
        self.alias: dict[tuple[int, int], tuple[int, int]] = {}

    def __getattr__(self, name: str):
        return getattr(os, name)

    def _numbered(self, info: os.stat_result) -> os.stat_result:
        dev, ino = self.alias.get((info.st_dev, info.st_ino), (info.st_dev, info.st_ino))
        fields = list(info[:10])
        fields[1], fields[2] = ino, dev
        return os.stat_result(fields)

    def fstat(self, fd: int) -> os.stat_result:
        return self._numbered(os.fstat(fd))

    def lstat(self, path) -> os.stat_result:
        return self._numbered(os.lstat(path))


@pytest.mark.parametrize("mode", ["power", "torn"])
@pytest.mark.parametrize("lost", ["replaced", "unlinked"])
def test_a_file_put_back_with_the_inode_number_of_a_gone_file_keeps_its_durable_bytes(
        root, monkeypatch, mode, lost):
    """The crash puts a lost file back as a new inode (the old CURRENT a rename replaced,
    or a file whose unlink was not durable), and the file system may number it as a file
    this IO wrote and that is gone since (here: an empty staging file, as the no-replace
    rename probe leaves). What the model tracked for that gone file must not cut the
    file put back: all of its bytes were durable (the matrix case
    [v2-c-torn-070-fsync_dir-.] once found CURRENT cut to half its size)."""
    from tests.crash import powercut

    numbers = _ReusedNumbers()
    monkeypatch.setattr(powercut, "os", numbers)
    old = b"old authority, durable before this IO" * 2
    (root / "CURRENT").write_bytes(old)
    io = PowerCutIO()
    _create(io, root / "probe", b"", sync=False)  # tracked: nothing of it durable
    # the test keeps the gone probe's inode open, so that no real file takes its number
    # and only the alias below gives it out again
    gone = os.open(root / "probe", os.O_RDONLY)
    try:
        gone_number = (os.fstat(gone).st_dev, os.fstat(gone).st_ino)
        io.unlink(str(root / "probe"))
        io.fsync_dir(str(root))  # the probe is gone for good
        if lost == "replaced":
            _create(io, root / "staged", b"new authority", sync=True)
            io.rename_replace(str(root), "staged", "CURRENT")
        else:
            io.unlink(str(root / "CURRENT"))
        put_back = powercut._restore

        def numbered_as_the_probe(path: str, data: bytes) -> None:
            put_back(path, data)
            if os.path.basename(path) == "CURRENT":
                info = os.lstat(path)
                numbers.alias[(info.st_dev, info.st_ino)] = gone_number

        monkeypatch.setattr(powercut, "_restore", numbered_as_the_probe)
        io.crash(mode, str(root))  # before the root's fsync: the change is undone
        assert numbers.alias, "the crash put CURRENT back"
        assert (root / "CURRENT").read_bytes() == old
    finally:
        os.close(gone)
