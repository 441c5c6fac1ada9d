"""A real full disk under a real ``tay serve``: a small filesystem fills up in the middle of a
multi-page ``pwrite`` (ENOSPC after a partial write). The writer cuts the segment back and
stops; once space is freed the restart keeps every acknowledged job (before the cut-back
rule it refused with ``incomplete_tail``).

On both journal writers (about 3 s each), on the first medium that mounts:

* ``ext4-loop``: an ext4 image on a loop device, under strict ``sync`` (the production
  setting). Needs root, ``mkfs.ext4`` and a free loop device.
* else ``tmpfs``: a tmpfs under ``--durability write`` (strict sync refuses tmpfs by
  design), so ENOSPC from the kernel is still exercised where loop devices are missing
  (containers often have mount rights but no /dev/loop*). Needs root.

The filesystem is 96 MiB because ``tay serve`` adopts a new store to Store v2 at start,
which wants 64 MiB of headroom; once it serves, a filler file leaves the journal 4 MiB.

Where neither mounts, the test is skipped with both reasons (the mount command's own
errors); ENOSPC itself stays covered by ``FaultyIO`` in
``tests/storage/test_cut_back.py`` and a real short write by ``test_short_write.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.crash.cluster import SCRATCH, ServerProcess, inspect_store
from tests.crash.test_short_write import restart_keeps_every_ack
from tests.crash.wire import enqueue_until_refused
from tests.scratch import unmount

SIZE_MB = 96
LEFT = 4 << 20  # free bytes the filler leaves to the journal
PAD = 60_000  # argument bytes per job: a frame spans many pages
# the media in order of preference, with their serve flags (() keeps strict sync)
MEDIA = (("ext4-loop", ()), ("tmpfs", ("--durability", "write")))


def mount_medium(medium: str, root: Path, mount: Path) -> str | None:
    """Mount ``medium`` on ``mount``; None when mounted, else why it cannot be."""
    if os.geteuid() != 0:
        return f"{medium}: mounting a filesystem needs root"
    if shutil.which("mount") is None:
        return f"{medium}: the mount command (util-linux) is not installed"
    if medium == "tmpfs":
        command = ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m,mode=0700", "tmpfs", str(mount)]
    else:
        if shutil.which("mkfs.ext4") is None:
            return "ext4-loop: mkfs.ext4 (e2fsprogs) is not installed"
        image = root / "fs.img"
        with open(image, "wb") as handle:
            handle.truncate(SIZE_MB << 20)
        made = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            return f"ext4-loop: mkfs.ext4 failed: {made.stderr.strip()}"
        command = ["mount", "-o", "loop", str(image), str(mount)]
    mounted = subprocess.run(command, capture_output=True, text=True)
    if mounted.returncode != 0:
        return f"{medium}: {' '.join(command[:3])} ... failed: {mounted.stderr.strip()}"
    return None


@pytest.fixture
def full_disk():
    """(scratch root, mount point, serve flags) of a fresh SIZE_MB filesystem."""
    SCRATCH.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="disk-full-", dir=SCRATCH))
    mount = root / "mnt"
    mount.mkdir()
    problems = []
    for medium, flags in MEDIA:
        problem = mount_medium(medium, root, mount)
        if problem is None:
            break
        problems.append(problem)
    else:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip("cannot fill a real disk here: " + "; ".join(problems))
    try:
        yield root, mount, flags
    finally:
        unmount(mount)
        shutil.rmtree(root, ignore_errors=True)


def take_all_but(mount: Path, filler: Path, left: int) -> None:
    """Write ``filler`` until ``left`` bytes of ``mount`` are free (fsynced)."""
    stat = os.statvfs(mount)
    remaining = stat.f_bavail * stat.f_frsize - left
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb") as handle:
        while remaining > 0:
            remaining -= handle.write(chunk[:remaining])
        os.fsync(handle.fileno())


async def fill(socket_path: str) -> tuple[dict[str, dict], dict | None]:
    return await enqueue_until_refused(socket_path, task="full.job", pad=PAD,
                                       limit=4 * (SIZE_MB << 20) // PAD, what="a full disk")


@pytest.mark.parametrize("writer", ["python", "c"])
def test_a_full_disk_leaves_no_torn_tail_and_restart_keeps_every_ack(full_disk, writer):
    root, mount, durability = full_disk
    data_dir = mount / "data"
    filler = mount / "filler"  # room to free afterwards, as an operator would
    server = ServerProcess(data_dir, str(root / "full.sock"), root / "full.log",
                           "--journal-writer", writer, *durability).start()
    try:
        take_all_but(mount, filler, LEFT)
        acked, refusal = asyncio.run(fill(server.socket_path))
        assert refusal is not None and refusal["error"]["code"] == "unknown_outcome", refusal
        assert len(acked) > 10
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 1
    finally:
        server.stop()  # a failed assertion must not leave the mount busy
    assert "append_failed" in server.log()  # ENOSPC stopped the writer
    active = sorted(data_dir.glob("**/segments/*"))[-1]  # Store v2: epochs/e-<id>/segments
    assert inspect_store(data_dir)["jobs"] == len(acked)  # no torn tail, even while full

    filler.unlink()
    restart_keeps_every_ack(root, data_dir, acked, *durability)
    assert active.exists()
