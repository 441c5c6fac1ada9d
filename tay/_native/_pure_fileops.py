"""File operations of the pure twin: os/fcntl plus ctypes for renameat2 and statfs.

Same contracts as the C helpers (csrc/fileops.c): every failure is an OSError carrying the
errno (and the path where there is one); short writes and EINTR are retried.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
from typing import Any

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100



@functools.cache
def _libc() -> tuple[Any, Any, Any]:
    """(ctypes, libc, statfs buffer type), loaded on first use.

    ``find_library`` runs a subprocess; the C module imports this twin for its argument
    checks, so loading libc eagerly would tax every process start for nothing.
    """
    import ctypes
    import ctypes.util

    class StatFs(ctypes.Structure):
        # f_type is the first member of struct statfs on every Linux ABI; the rest is
        # padding large enough for the full structure (120 bytes on 64-bit).
        _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 256)]

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return ctypes, libc, StatFs


def write_all_at(fd: int, data: Any, offset: int) -> None:
    """pwrite all of ``data`` at ``offset``; os.pwrite already retries EINTR (PEP 475)."""
    view = memoryview(data).cast("B")
    written = 0
    while written < len(view):
        count = os.pwrite(fd, view[written:], offset + written)
        if count == 0:
            raise OSError(errno.EIO, "pwrite wrote 0 bytes")
        written += count


def fdatasync(fd: int) -> None:
    os.fdatasync(fd)


def fsync(fd: int) -> None:
    os.fsync(fd)


def fsync_dir(path: str) -> None:
    """Open the directory read-only and fsync it, so a rename or create in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flock_exclusive(fd: int) -> bool:
    """Take LOCK_EX|LOCK_NB; False when another open file description holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def rename_noreplace(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
    """renameat2(RENAME_NOREPLACE); EEXIST if the target exists. Never a replacing rename."""
    ctypes, libc, _ = _libc()
    renameat2 = getattr(libc, "renameat2", None)
    src, dst = os.fsencode(src_name), os.fsencode(dst_name)
    while True:
        if renameat2 is not None:
            result = renameat2(src_dir_fd, src, dst_dir_fd, dst, _RENAME_NOREPLACE)
        else:  # glibc < 2.28: the raw syscall (x86-64 number 316, aarch64 276)
            number = 316 if os.uname().machine == "x86_64" else 276
            result = libc.syscall(number, src_dir_fd, src, dst_dir_fd, dst, _RENAME_NOREPLACE)
        if result == 0:
            return
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code), src_name, None, dst_name)


def filesystem_magic(path: str) -> int:
    """statfs(path).f_type: 0xEF53 ext2/3/4, 0x58465342 XFS, 0x9123683E Btrfs, ..."""
    ctypes, libc, statfs_buffer = _libc()
    buf = statfs_buffer()
    while libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code), path)
    return buf.f_type & 0xFFFFFFFF
