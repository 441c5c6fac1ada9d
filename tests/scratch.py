"""Where tests put the stores they create, wherever the checkout lives.

Strict ``sync`` durability refuses /tmp, /var/tmp and /dev/shm (the OS may empty them) and
anything but ext4/XFS/Btrfs, so a checkout cloned into /tmp cannot hold its own scratch
stores. ``scratch_root()`` picks the first candidate the engine's own check accepts:
``TAY_TEST_SCRATCH`` (refused loudly when unsuitable), the checkout's git-ignored ``.tmp/``,
``$XDG_DATA_HOME/tay/test-scratch`` (default ``~/.local/share``), ``/var/lib/tay/test-scratch``.

Each test process works in its own sub-directory, removed when the process exits; one left
behind by a killed run is removed by the next run once its process is gone (after unmounting
whatever the run mounted inside it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from tay.bench.paths import data_home
from tay.failures import RecoveryRefused
from tay.storage.fsio import RealIO
from tay.storage.journal.setup import check_durability, nearest_existing_ancestor

REPO = Path(__file__).resolve().parents[1]
SESSION_PREFIX = "run-"


def candidates() -> list[Path]:
    return [REPO / ".tmp", data_home() / "tay" / "test-scratch", Path("/var/lib/tay/test-scratch")]


def refusal(path: Path) -> str | None:
    """Why strict sync (or plain permissions) would refuse stores under ``path``; None if fine."""
    try:
        check_durability(RealIO(), str(path), "sync", True)
    except RecoveryRefused as refused:
        return refused.message
    if not os.access(nearest_existing_ancestor(str(path)), os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return None


def _pick_base() -> Path:
    explicit = os.environ.get("TAY_TEST_SCRATCH")
    if explicit:
        problem = refusal(Path(explicit).absolute())
        if problem:
            raise RuntimeError(f"TAY_TEST_SCRATCH={explicit} cannot hold strict-sync test stores: {problem}")
        return Path(explicit).absolute()
    problems = []
    for path in candidates():
        problem = refusal(path)
        if problem is None:
            return path
        problems.append(f"{path}: {problem}")
    raise RuntimeError("no directory accepts strict-sync test stores (" + "; ".join(problems)
                       + "); set TAY_TEST_SCRATCH to a directory on ext4/XFS/Btrfs outside /tmp")


@cache
def scratch_root() -> Path:
    """This process's scratch directory (created on first use, removed at exit)."""
    base = _pick_base()
    base.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(base)
    session = Path(tempfile.mkdtemp(prefix=f"{SESSION_PREFIX}{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, session, True)
    return session


def scratch_dir(prefix: str) -> Path:
    """A fresh directory under ``scratch_root()``; the caller removes it (or exit does)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))


def _remove_abandoned(base: Path) -> None:
    """Session directories whose process no longer exists (a run killed before exit)."""
    for entry in base.glob(f"{SESSION_PREFIX}*-*"):
        pid_text = entry.name[len(SESSION_PREFIX):].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            for mount in mounts_under(entry):  # e.g. a full-disk test's filesystem
                unmount(mount)
            shutil.rmtree(entry, ignore_errors=True)


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below ``directory``, deepest first."""
    prefix = str(directory.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as table:
        # the table octal-escapes spaces and the like (a space is \040)
        points = [line.split()[1].encode().decode("unicode_escape") for line in table]
    inside = [Path(point) for point in points
              if point == prefix or point.startswith(prefix + os.sep)]
    return sorted(inside, key=lambda path: len(path.parts), reverse=True)


def unmount(mount: Path) -> None:
    """Unmount, lazily if still busy: a loop device detaches once its last user is gone."""
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
