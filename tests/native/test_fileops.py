"""File operations on a real directory (the strict-sync scratch root, ext4/XFS/Btrfs)."""

from __future__ import annotations

import errno
import os
import shutil
import uuid

import pytest

from tests.scratch import scratch_root



@pytest.fixture
def workdir():
    path = scratch_root() / f"native-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path)


def test_write_all_at_content(native, workdir):
    fd = os.open(workdir / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        native.write_all_at(fd, b"hello", 0)
        native.write_all_at(fd, memoryview(b"__world"), 5)
        native.write_all_at(fd, bytearray(b"W"), 7)
        native.fdatasync(fd)
        native.fsync(fd)
    finally:
        os.close(fd)
    assert (workdir / "f").read_bytes() == b"hello__World"


def test_write_all_at_bad_fd(native, workdir):
    fd = os.open(workdir / "r", os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as caught:
            native.write_all_at(fd, b"x", 0)
        assert caught.value.errno == errno.EBADF
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        native.fsync(fd)


def test_fsync_dir(native, workdir):
    native.fsync_dir(str(workdir))
    with pytest.raises(OSError) as caught:
        native.fsync_dir(str(workdir / "missing"))
    assert caught.value.errno == errno.ENOENT and "missing" in caught.value.filename


def test_flock_busy_from_second_descriptor(native, workdir):
    first = os.open(workdir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    second = os.open(workdir / "lock", os.O_RDWR)
    try:
        assert native.flock_exclusive(first) is True
        assert native.flock_exclusive(second) is False
    finally:
        os.close(first)
        os.close(second)


def test_rename_noreplace(native, workdir):
    (workdir / "a").write_bytes(b"A")
    (workdir / "b").write_bytes(b"B")
    dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            native.rename_noreplace(dir_fd, "a", dir_fd, "b")
        assert caught.value.errno == errno.EEXIST
        assert (workdir / "b").read_bytes() == b"B"
        native.rename_noreplace(dir_fd, "a", dir_fd, "c")
        with pytest.raises(OSError) as caught:
            native.rename_noreplace(dir_fd, "a", dir_fd, "d")
        assert caught.value.errno == errno.ENOENT
    finally:
        os.close(dir_fd)
    assert sorted(p.name for p in workdir.iterdir()) == ["b", "c"]


def test_filesystem_magic(native, workdir):
    assert native.filesystem_magic(str(workdir)) == 0xEF53  # /work is ext4
    with pytest.raises(OSError) as caught:
        native.filesystem_magic(str(workdir / "missing"))
    assert caught.value.errno == errno.ENOENT
