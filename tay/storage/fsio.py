"""The I/O seam of the journal: every syscall the writer and recovery make goes through here.

``RealIO`` forwards to ``tay._native`` (either twin) and ``os``; paths are opened with
``O_NOFOLLOW`` so a symlink swapped in under the store is refused, never followed.

``FaultyIO`` is the test double for power loss, in the style of LevelDB's fault-injection
test: it performs the real operations on a real directory but remembers what was made
durable (file bytes up to the last fsync/fdatasync of that file; directory entries up to
the last fsync of that directory). ``crash()`` then throws away everything else, optionally
keeping a torn prefix of the last unsynced write. It can also fail the Nth write or the Nth
sync with ``ENOSPC``/``EIO``; a failing write may first really write a prefix of its data
(``short_write_bytes``), as a disk that fills up in the middle of a ``pwrite`` does.
"""

from __future__ import annotations

import errno
import os
from types import ModuleType
from typing import Any

from tay._frozen import Record

OPEN_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
# Everything tay creates in a data directory is private to its owner, whatever the umask
# (which can only narrow these): job arguments and results are in the segments.
FILE_MODE = 0o600
DIR_MODE = 0o700


def _default_native() -> ModuleType:
    import tay._native

    return tay._native


class RealIO:
    """Real file operations through one native module (``tay._native`` or a chosen twin)."""

    def __init__(self, native: ModuleType | None = None) -> None:
        self.native = native if native is not None else _default_native()

    # -- files --------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        return os.open(path, flags | OPEN_NOFOLLOW, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write_all_at(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        self.native.write_all_at(fd, data, offset)

    def truncate(self, fd: int, length: int) -> None:
        """ftruncate: only the writer's cut-back after a failed write and ``tay storage
        repair`` shorten a file, and never below what was acknowledged."""
        os.ftruncate(fd, length)

    def read_at(self, fd: int, length: int, offset: int) -> bytes:
        return os.pread(fd, length, offset)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def fdatasync(self, fd: int) -> None:
        self.native.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self.native.fsync(fd)

    def flock_exclusive(self, fd: int) -> bool:
        return bool(self.native.flock_exclusive(fd))

    # -- directories --------------------------------------------------------------------
    def fsync_dir(self, path: str) -> None:
        self.native.fsync_dir(path)

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        os.mkdir(path, mode)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def lstat(self, path: str) -> os.stat_result:
        return os.lstat(path)

    def lstat_at(self, dir_fd: int, name: str) -> os.stat_result:
        """fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW): one lookup, no path walk."""
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def open_dir(self, path: str) -> int:
        """A pinned descriptor of directory ``path`` (a symlink is refused, never followed)."""
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | OPEN_NOFOLLOW)

    def unlink(self, path: str) -> None:
        """Remove a file: the rename probe's own files, an adoption rollback's unpublished
        markers and a compaction's reclaim of what no CURRENT names (never history)."""
        os.unlink(path)

    def rename_noreplace(self, directory: str, source: str, target: str) -> None:
        """Publish ``directory/source`` as ``directory/target``; EEXIST if the target exists."""
        self.move_noreplace(directory, source, directory, target)

    def move_noreplace(self, source_dir: str, source: str, target_dir: str, target: str) -> None:
        """``renameat2(RENAME_NOREPLACE)`` across two directories (adoption moves
        ``segments/`` to ``epochs/legacy-<nonce>`` and a rollback moves it back)."""
        src_fd = os.open(source_dir, os.O_RDONLY | os.O_DIRECTORY | OPEN_NOFOLLOW)
        try:
            dst_fd = os.open(target_dir, os.O_RDONLY | os.O_DIRECTORY | OPEN_NOFOLLOW)
            try:
                self.native.rename_noreplace(src_fd, source, dst_fd, target)
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)

    def rename_replace(self, directory: str, source: str, target: str) -> None:
        """Plain ``renameat`` replacing ``target``: only a later CURRENT switch does this
        (§3.8 step 9), after checking the old file's identity."""
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | OPEN_NOFOLLOW)
        try:
            os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory (reclaim of a predecessor epoch only)."""
        os.rmdir(path)

    def filesystem_magic(self, path: str) -> int:
        return int(self.native.filesystem_magic(path))


class _FileTrack(Record):
    """What FaultyIO knows about one path: its durable size and the last unsynced write."""

    __slots__ = ("durable_size", "last_write")
    durable_size: int
    last_write: tuple[int, int] | None  # (offset, length) of the newest unsynced write

    def __init__(self, durable_size: int = 0, last_write: tuple[int, int] | None = None) -> None:
        self.durable_size = durable_size
        self.last_write = last_write


class _DirTrack(Record):
    """Entries added to / removed from one directory since its last fsync."""

    __slots__ = ("added", "renamed_from")
    added: set[str]
    renamed_from: dict[str, str]  # target -> source

    def __init__(self, added: set[str] | None = None,
                 renamed_from: dict[str, str] | None = None) -> None:
        self.added = set() if added is None else added  # a new set and dict for each
        self.renamed_from = {} if renamed_from is None else renamed_from


class FaultyIO(RealIO):
    """RealIO that can simulate power loss and inject write/sync failures (tests only)."""

    def __init__(
        self,
        native: ModuleType | None = None,
        *,
        fail_write_at: int | None = None,
        fail_sync_at: int | None = None,
        fail_errno: int = errno.EIO,
        short_write_bytes: int = 0,
    ) -> None:
        super().__init__(native)
        self.fail_write_at = fail_write_at
        self.fail_sync_at = fail_sync_at
        self.fail_errno = fail_errno
        # a failing write first writes this many bytes of its data for real (a short write)
        self.short_write_bytes = short_write_bytes
        self.writes = 0
        self.syncs = 0
        self._fd_paths: dict[int, str] = {}
        self._files: dict[str, _FileTrack] = {}
        self._dirs: dict[str, _DirTrack] = {}

    # -- bookkeeping ----------------------------------------------------------------------
    def _dir(self, path: str) -> _DirTrack:
        return self._dirs.setdefault(os.path.abspath(path), _DirTrack())

    def _inject(self, counter: str, limit: int | None) -> None:
        count = getattr(self, counter) + 1
        setattr(self, counter, count)
        if limit is not None and count >= limit:
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        path = os.path.abspath(path)
        existed = os.path.lexists(path)
        fd = super().open(path, flags, mode)
        self._fd_paths[fd] = path
        if path not in self._files:
            # a file that already existed before tracking started is durable as it is
            self._files[path] = _FileTrack(durable_size=os.fstat(fd).st_size if existed else 0)
        if not existed:
            self._dir(os.path.dirname(path)).added.add(os.path.basename(path))
        return fd

    def close(self, fd: int) -> None:
        self._fd_paths.pop(fd, None)
        super().close(fd)

    def write_all_at(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        try:
            self._inject("writes", self.fail_write_at)
        except OSError:
            prefix = memoryview(data)[: self.short_write_bytes]
            if len(prefix):
                super().write_all_at(fd, prefix, offset)  # really on disk, then the failure
                self._files[self._fd_paths[fd]].last_write = (offset, len(prefix))
            raise
        super().write_all_at(fd, data, offset)
        self._files[self._fd_paths[fd]].last_write = (offset, len(data))

    def _file_synced(self, fd: int) -> None:
        self._inject("syncs", self.fail_sync_at)
        track = self._files[self._fd_paths[fd]]
        track.durable_size = os.fstat(fd).st_size
        track.last_write = None

    def fdatasync(self, fd: int) -> None:
        self._file_synced(fd)
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._file_synced(fd)
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self._inject("syncs", self.fail_sync_at)
        super().fsync_dir(path)
        self._dirs.pop(os.path.abspath(path), None)

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        super().mkdir(path, mode)
        path = os.path.abspath(path)
        self._dir(os.path.dirname(path)).added.add(os.path.basename(path))

    def unlink(self, path: str) -> None:
        super().unlink(path)
        path = os.path.abspath(path)
        self._files.pop(path, None)
        self._dir(os.path.dirname(path)).added.discard(os.path.basename(path))

    def rename_noreplace(self, directory: str, source: str, target: str) -> None:
        super().rename_noreplace(directory, source, target)
        directory = os.path.abspath(directory)
        track = self._dir(directory)
        moved = self._files.pop(os.path.join(directory, source), None)
        if moved is not None:
            self._files[os.path.join(directory, target)] = moved
        for fd, path in self._fd_paths.items():
            if path == os.path.join(directory, source):
                self._fd_paths[fd] = os.path.join(directory, target)
        if source in track.added:
            track.added.discard(source)
            track.added.add(target)
        else:
            track.renamed_from[target] = source

    # -- power loss -----------------------------------------------------------------------
    def crash(self, torn_bytes: int = 0) -> None:
        """Lose everything not made durable, as a power cut would.

        Open descriptors are closed (the process died). Unsynced file bytes are cut off,
        except that the newest unsynced write of each file keeps its first ``torn_bytes``
        bytes (a torn write). Unsynced directory entries disappear; an unsynced rename of a
        durable entry is undone.
        """
        for fd in list(self._fd_paths):
            self.close(fd)
        for directory, track in self._dirs.items():
            for target, source in track.renamed_from.items():
                os.rename(os.path.join(directory, target), os.path.join(directory, source))
                moved = self._files.pop(os.path.join(directory, target), None)
                if moved is not None:
                    self._files[os.path.join(directory, source)] = moved
            for name in track.added:
                self._remove(os.path.join(directory, name))
        self._dirs.clear()
        for path, track in self._files.items():
            if not os.path.lexists(path):
                continue
            keep = track.durable_size
            if track.last_write is not None and torn_bytes > 0:
                offset, length = track.last_write
                if offset >= keep:
                    keep = max(keep, offset + min(torn_bytes, length))
            os.truncate(path, min(keep, os.path.getsize(path)))
            track.last_write = None

    def _remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            for name in os.listdir(path):
                self._remove(os.path.join(path, name))
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
        self._files.pop(path, None)

    def describe(self) -> dict[str, Any]:
        """Counters, for test assertions."""
        return {"writes": self.writes, "syncs": self.syncs}
