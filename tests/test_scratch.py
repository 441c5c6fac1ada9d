"""The test suite's scratch location follows strict sync's rules, not the checkout's path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import scratch


def test_volatile_paths_are_refused_and_named():
    assert "sync_refuses_volatile_path" in scratch.refusal(Path("/tmp/x/.tmp"))
    assert "sync_refuses_volatile_path" in scratch.refusal(Path("/dev/shm/x"))


def test_a_checkout_under_tmp_falls_back_to_the_xdg_data_home(monkeypatch):
    home = scratch.scratch_root() / "xdg"  # somewhere strict sync accepts
    monkeypatch.setattr(scratch, "REPO", Path("/tmp/some-clone"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.delenv("TAY_TEST_SCRATCH", raising=False)
    assert scratch._pick_base() == home / "tay" / "test-scratch"


def test_an_unsuitable_override_is_refused_loudly(monkeypatch):
    monkeypatch.setenv("TAY_TEST_SCRATCH", "/tmp/scratch")
    with pytest.raises(RuntimeError, match="TAY_TEST_SCRATCH=/tmp/scratch .*sync_refuses_volatile_path"):
        scratch._pick_base()


def test_the_session_directory_is_private_to_this_process():
    root = scratch.scratch_root()
    assert root.is_dir() and root.name.startswith(f"{scratch.SESSION_PREFIX}{os.getpid()}-")
    assert scratch.refusal(root) is None


def test_an_abandoned_session_is_unmounted_before_it_is_removed():
    """A run killed mid full-disk test leaves its filesystem mounted in its session directory;
    the next run must unmount it (rmtree alone fails on the mount point and leaves it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    dead = 2**22 + 1  # above the kernel's pid_max default: no such process
    while scratch._alive(dead):
        dead += 1
    base = scratch.scratch_dir("abandoned-")
    mount = base / f"{scratch.SESSION_PREFIX}{dead}-x" / "disk-full-y" / "mnt"
    mount.mkdir(parents=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        (mount / "filler").write_bytes(b"x")
        assert scratch.mounts_under(base) == [mount.resolve()]
        scratch._remove_abandoned(base)
        assert scratch.mounts_under(base) == []
        assert list(base.iterdir()) == []
    finally:
        if scratch.mounts_under(base):
            scratch.unmount(mount)
