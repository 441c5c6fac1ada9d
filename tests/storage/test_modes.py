"""The data directory is private: 0700 directories and 0600 files under a umask of 022 (the
usual one, which leaves 0755/0644), for everything tay creates (bootstrap, rotation on both
writers, compaction, repair's side file); looser modes already there are reported by
``inspect`` and warned about when ``tay serve`` starts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tay.storage.v2.layout import history_dir

from tests.storage.conftest import FIXTURE_STORE_ID
from tay.bench.server import socket_accepts
from tay.storage.journal.native_commit import make_committer, native_writer_available
from tay.storage.journal.writer import init_store
from tay.storage.modes import loose_modes
from tay.storage.recovery.recover import TableConsumer, recover

REPO = Path(__file__).resolve().parents[2]
WRITERS = [pytest.param("python", id="python"),
           pytest.param("c", id="c", marks=pytest.mark.skipif(
               not native_writer_available(), reason="C writer not built"))]


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    """Every entry below ``root`` (and ``root`` itself as ".") and its permission bits."""
    found = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def assert_private(root: Path) -> None:
    for name, mode in modes(root).items():
        is_dir = (root / name).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (name, oct(mode))


@pytest.mark.parametrize("writer", WRITERS)
def test_everything_tay_creates_is_private_under_umask_022(umask_022, data_dir, writer):
    init_store(str(data_dir / "nested"), durability="write", store_id=FIXTURE_STORE_ID)
    root = data_dir / "nested"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700  # a created parent too
    journal = recover(str(root), consumer=lambda *a: None, durability="write",
                      rotation_target=400, allow_small_rotation_target_for_tests=True).journal
    committer = make_committer(journal, 4, 0, writer=writer)
    committer.wait(committer.append([(seq, 1, 1, b"p" * 100) for seq in range(1, 10)]),
                   timeout=30)
    committer.close()
    journal.close()
    assert len(list((root / "segments").iterdir())) > 2  # rotations made successors
    assert_private(root)
    assert loose_modes(str(root)) == []


def test_compaction_and_repair_create_private_files(umask_022, data_dir):
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.recovery.repair import repair_store
    from tay.storage.v2 import Retention

    init_store(str(data_dir), durability="write", store_id=FIXTURE_STORE_ID)
    compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)
    recovered = recover(str(data_dir), consumer=TableConsumer(), durability="write")
    tail = Path(recovered.journal.segments_dir)
    recovered.journal.close()
    highest = sorted(tail.iterdir())[-1]
    with open(highest, "ab") as handle:
        handle.write(b"TA")
    assert repair_store(str(data_dir)).repaired
    assert_private(data_dir)


def test_loose_modes_lists_tays_entries_only(data_dir):
    init_store(str(data_dir), durability="write")
    os.chmod(data_dir, 0o755)
    os.chmod(data_dir / "STORE", 0o644)
    os.chmod(data_dir / "segments", 0o750)
    (data_dir / "NOTES.txt").write_text("the operator's own file")
    os.chmod(data_dir / "NOTES.txt", 0o644)
    os.symlink("/etc/hostname", data_dir / "link")  # never followed
    found = dict(loose_modes(str(data_dir)))
    assert found == {".": 0o755, "STORE": 0o644, "segments": 0o750}


def serve_briefly(data_dir: Path, *flags: str) -> str:
    """Start ``tay serve`` (umask 022) until it listens, stop it; its log."""
    socket_dir = tempfile.mkdtemp(prefix="tay-modes-")
    socket_path = os.path.join(socket_dir, "s.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(data_dir), "--socket",
         socket_path, "--durability", "write", *flags], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: os.umask(0o022))
    try:
        deadline = time.monotonic() + 20
        while not socket_accepts(socket_path):
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            time.sleep(0.05)
    finally:
        process.terminate()
        output = process.communicate(timeout=20)[0]
        shutil.rmtree(socket_dir, ignore_errors=True)
    return output


def test_serve_under_umask_022_creates_a_private_store_and_warns_about_loose_ones(data_dir):
    output = serve_briefly(data_dir, "--init-if-missing")
    assert "open to other local users" not in output
    assert_private(data_dir)

    segments = os.path.relpath(history_dir(str(data_dir)), data_dir)  # the epoch's
    os.chmod(data_dir / "STORE", 0o644)
    os.chmod(data_dir / segments, 0o755)
    done = subprocess.run([sys.executable, "-m", "tay.cli", "storage", "inspect",
                           "--data-dir", str(data_dir), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["loose_modes"] == [{"path": "STORE", "mode": "0644"},
                                                      {"path": segments, "mode": "0755"}]
    warnings = [line for line in serve_briefly(data_dir).splitlines() if "WARNING" in line]
    assert len(warnings) == 1, warnings
    assert "STORE 0644" in warnings[0] and f"{segments} 0755" in warnings[0]
    assert f"chmod -R go-rwx {data_dir}" in warnings[0]
    assert stat.S_IMODE((data_dir / "STORE").stat().st_mode) == 0o644  # reported, not changed
