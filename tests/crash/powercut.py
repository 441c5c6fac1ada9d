"""A crash at the Nth disk operation, for the compaction crash matrix.

``PowerCutIO`` is the real I/O seam (``tay.storage.fsio.RealIO``, through either native twin)
with a counter in front of every operation that changes the disk: creating open, write,
truncate, fsync, fdatasync, directory fsync, mkdir, rename (no-replace, cross-directory,
replacing), unlink and rmdir. Each one is numbered (1, 2, ...) and labelled; at operation
``crash_at`` the process "dies": ``Crash`` (a ``BaseException``, so no ``except OSError``
or ``except Exception`` can swallow it) is raised *before* the operation, and every later
operation raises it again, so ``finally`` clauses cannot write either. Operations 1..N-1 have
happened; N and later have not. A run without ``crash_at`` (the dry run) lists them all.

What survives the crash is then one of three states:

* ``"kill"``: the process was killed (kill -9): everything that was done stays, the page
  cache included.
* ``"power"``: the machine lost power: only what was made durable stays. File bytes survive
  up to the last fsync/fdatasync of that file (tracked per inode, so a staged file keeps its
  bytes through its rename); a directory change (create, mkdir, rename, unlink, rmdir)
  survives only if a directory it touched was fsynced after it (a rename between two
  directories is one journaled operation: either fsync keeps it). Lost directory changes are
  undone newest first: an unlinked file comes back with its durable bytes, a replaced file
  with its old bytes, a rename goes back, a created entry goes away.
* ``"torn"``: a power cut in the middle of writing back: as ``"power"``, except that a file
  whose unsynced bytes were still in flight keeps the first half of them (at least one
  byte): its tail ends inside whatever was being appended.

Real fsyncs are skipped unless ``real_sync``: a simulated power cut decides what is durable,
and a real fsync (3 ms each here) could not change what the test observes. Writes, renames
and the rest are real calls through ``native`` (the C or the pure-Python twin).
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import tempfile
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from tay.storage.fsio import DIR_MODE, FILE_MODE, RealIO


class Crash(BaseException):
    """The simulated end of the process before operation ``index``."""

    def __init__(self, index: int, label: str) -> None:
        super().__init__(f"crash before operation {index}: {label}")
        self.index = index
        self.label = label


@dataclass
class _Change:
    """One directory change not yet known durable: the directories whose fsync keeps it,
    and how to undo it."""

    dirs: tuple[str, ...]
    undo: Callable[[], None]
    durable: bool = False


@dataclass
class Operation:
    index: int
    kind: str  # open_create, write, truncate, fsync, fdatasync, fsync_dir, mkdir, rename, ...
    path: str  # the file or directory operated on (a rename: the target)

    def label(self, root: str) -> str:
        return f"{self.kind} {os.path.relpath(self.path, root)}"


@dataclass
class _Inode:
    durable_size: int


class PowerCutIO(RealIO):
    """RealIO that numbers every disk-changing operation and can die at one of them."""

    def __init__(self, native: ModuleType | None = None, *, crash_at: int | None = None,
                 real_sync: bool = False) -> None:
        super().__init__(native)
        self.crash_at = crash_at
        self.real_sync = real_sync
        self.operations: list[Operation] = []
        self.dead = False
        self._fds: dict[int, str] = {}
        self._inodes: dict[tuple[int, int], _Inode] = {}
        self._changes: list[_Change] = []

    # -- the counter -------------------------------------------------------------------
    def next_index(self) -> int:
        """The number the next operation gets."""
        return len(self.operations) + 1

    def _step(self, kind: str, path: str) -> None:
        index = self.next_index()
        if self.dead or (self.crash_at is not None and index >= self.crash_at):
            self.dead = True
            raise Crash(index, f"{kind} {path}")
        self._note(Operation(index, kind, os.path.abspath(path)))

    def _note(self, operation: Operation) -> None:
        self.operations.append(operation)

    def _inode(self, fd: int) -> _Inode:
        info = os.fstat(fd)
        return self._inodes.setdefault((info.st_dev, info.st_ino), _Inode(info.st_size))

    def _changed(self, undo: Callable[[], None], *dirs: str) -> None:
        self._changes.append(_Change(tuple(os.path.abspath(d) for d in dirs), undo))

    # -- files -------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        path = os.path.abspath(path)
        creates = bool(flags & os.O_CREAT) and not os.path.lexists(path)
        if creates:
            self._step("open_create", path)
        elif self.dead:
            raise Crash(len(self.operations) + 1, f"open {path}")
        fd = super().open(path, flags, mode)
        self._fds[fd] = path
        if creates:
            self._inodes[(lambda s: (s.st_dev, s.st_ino))(os.fstat(fd))] = _Inode(0)
            self._changed(lambda: _remove(path), os.path.dirname(path))
        return fd

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        super().close(fd)

    def write_all_at(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        self._step("write", self._fds.get(fd, f"fd {fd}"))
        self._inode(fd)
        if offset != os.fstat(fd).st_size:
            raise AssertionError(f"a write at {offset} inside {self._fds.get(fd)}: the crash "
                                 "model (and the matrix) assume files only grow at the end")
        super().write_all_at(fd, data, offset)

    def truncate(self, fd: int, length: int) -> None:
        self._step("truncate", self._fds.get(fd, f"fd {fd}"))
        inode = self._inode(fd)
        inode.durable_size = min(inode.durable_size, length)
        super().truncate(fd, length)

    def _file_sync(self, kind: str, fd: int, call: Callable[[int], None]) -> None:
        self._step(kind, self._fds.get(fd, f"fd {fd}"))
        self._inode(fd).durable_size = os.fstat(fd).st_size
        if self.real_sync:
            call(fd)

    def fsync(self, fd: int) -> None:
        self._file_sync("fsync", fd, super().fsync)

    def fdatasync(self, fd: int) -> None:
        self._file_sync("fdatasync", fd, super().fdatasync)

    # -- directories -------------------------------------------------------------------
    def fsync_dir(self, path: str) -> None:
        self._step("fsync_dir", path)
        if self.real_sync:
            super().fsync_dir(path)
        path = os.path.abspath(path)
        for change in self._changes:
            if path in change.dirs:
                change.durable = True

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        self._step("mkdir", path)
        super().mkdir(path, mode)
        path = os.path.abspath(path)
        self._changed(lambda: _remove(path), os.path.dirname(path))

    def unlink(self, path: str) -> None:
        self._step("unlink", path)
        path = os.path.abspath(path)
        kept = self._durable_bytes(path)
        super().unlink(path)
        self._changed(lambda: self._restore(path, kept), os.path.dirname(path))

    def rmdir(self, path: str) -> None:
        self._step("rmdir", path)
        super().rmdir(path)
        path = os.path.abspath(path)
        self._changed(lambda: os.mkdir(path, DIR_MODE), os.path.dirname(path))

    def move_noreplace(self, source_dir: str, source: str, target_dir: str, target: str) -> None:
        # rename_noreplace (same directory) comes here too: one operation, counted once
        self._step("rename", os.path.join(target_dir, target))
        super().move_noreplace(source_dir, source, target_dir, target)
        old, new = os.path.join(source_dir, source), os.path.join(target_dir, target)
        self._changed(lambda: os.rename(new, old), source_dir, target_dir)

    def rename_replace(self, directory: str, source: str, target: str) -> None:
        self._step("rename_replace", os.path.join(directory, target))
        old, new = os.path.join(directory, source), os.path.join(directory, target)
        replaced = self._durable_bytes(new) if os.path.lexists(new) else None
        super().rename_replace(directory, source, target)

        def undo() -> None:
            os.rename(new, old)
            if replaced is not None:
                self._restore(new, replaced)

        self._changed(undo, directory)

    def _restore(self, path: str, data: bytes) -> None:
        """Put back a lost file with its durable bytes, all of them durable. The file is a
        new inode, and the file system may give it the number of one this IO tracked and
        that is gone since (an unlinked or replaced file): forget that one, or the crash
        would cut the restored file to the old file's durable size."""
        _restore(path, data)
        info = os.lstat(path)
        self._inodes.pop((info.st_dev, info.st_ino), None)

    def _durable_bytes(self, path: str) -> bytes:
        """What of ``path`` a power cut would keep (all of it unless this IO wrote it)."""
        with open(path, "rb") as handle:
            data = handle.read()
            info = os.fstat(handle.fileno())
        inode = self._inodes.get((info.st_dev, info.st_ino))
        return data if inode is None else data[:inode.durable_size]

    # -- the crash ---------------------------------------------------------------------
    def crash(self, mode: str, root: str) -> None:
        """Leave ``root`` as the crash ``mode`` ("kill", "power" or "torn") would."""
        if mode not in ("kill", "power", "torn"):
            raise ValueError(mode)
        self.dead = True
        for fd in list(self._fds):
            self.close(fd)
        if mode == "kill":
            return
        for change in reversed(self._changes):
            if not change.durable:
                change.undo()
        self._changes.clear()
        for directory, _, files in os.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                info = os.lstat(path)
                inode = self._inodes.get((info.st_dev, info.st_ino))
                if inode is not None and info.st_size > inode.durable_size:
                    unsynced = info.st_size - inode.durable_size
                    kept = max(1, unsynced // 2) if mode == "torn" else 0
                    os.truncate(path, inode.durable_size + kept)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _restore(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class SharedCountIO(PowerCutIO):
    """A ``PowerCutIO`` that a forked child counts with: an online compaction's storage
    work runs in a process the server forks, and its operations and the server's are one
    sequence. The count is in shared memory and the operations are appended to a file,
    so ``operations`` and ``next_index`` are the same in both processes. (The power-cut
    undo state stays per process: use it to count and kill, not to cut power.)"""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._count = mmap.mmap(-1, 8)  # anonymous and shared: the child writes it too
        fd, self._log = tempfile.mkstemp(prefix="powercut-operations-")
        os.close(fd)
        weakref.finalize(self, os.unlink, self._log)

    def next_index(self) -> int:
        return struct.unpack_from("<Q", self._count)[0] + 1

    def _note(self, operation: Operation) -> None:
        with open(self._log, "a") as out:
            out.write(f"{operation.kind}\t{operation.path}\n")
        struct.pack_into("<Q", self._count, 0, operation.index)

    @property
    def operations(self) -> list[Operation]:  # type: ignore[override]
        with open(self._log) as lines:
            return [Operation(index, *line.rstrip("\n").split("\t", 1))
                    for index, line in enumerate(lines, 1)]

    @operations.setter
    def operations(self, value: list[Operation]) -> None:
        assert not value  # PowerCutIO.__init__'s empty list: the file starts empty


@dataclass
class Plan:
    """The dry run of one operation sequence: every operation, in order."""

    root: str
    operations: list[Operation] = field(default_factory=list)

    def labels(self) -> list[str]:
        return [op.label(self.root) for op in self.operations]

    def first(self, kind: str, name: str) -> int:
        """The index of the first ``kind`` operation on a path ending in ``name``."""
        for op in self.operations:
            if op.kind == kind and op.path.endswith(name):
                return op.index
        raise LookupError(f"no {kind} of {name} in {self.labels()}")

    def next_after(self, index: int, kind: str, path: str) -> int:
        for op in self.operations[index:]:
            if op.kind == kind and op.path == os.path.abspath(path):
                return op.index
        raise LookupError(f"no {kind} of {path} after operation {index}")
