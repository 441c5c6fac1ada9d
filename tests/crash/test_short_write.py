"""A real short write under a real ``tay serve``: the file-size limit (RLIMIT_FSIZE) makes
the kernel write only part of a frame, as a full disk does in the middle of a multi-page
``pwrite``; the next ``pwrite`` fails with EFBIG (Python ignores SIGXFSZ).

The writer must cut the segment back to its last barrier before it stops, so the restart
succeeds and keeps every acknowledged job (on a writer without the cut-back the restart is
refused with ``incomplete_tail``). A process that dies at that moment (SIGXFSZ's default
action, like kill -9) leaves the torn record, which ``tay storage repair`` removes.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tay.storage.v2.layout import history_dir
from tests.crash.cluster import REPO, ServerProcess, inspect_store, serve_command
from tests.crash import wire
from tests.crash.wire import WireClient
from tay.bench.server import socket_accepts

FILE_LIMIT = 96 * 1024  # bytes any file of the limited server may reach
PAD = 5_000  # argument bytes per job: a frame of ~5 KB crosses the limit part-way


@pytest.fixture
def root(scratch):
    return scratch


def limited_server(data_dir: Path, socket_path: str, log_path: Path,
                   die_on_limit: bool) -> subprocess.Popen:
    """``tay serve`` whose files may not grow past FILE_LIMIT.

    ``die_on_limit``: restore SIGXFSZ's default action, so the process is killed by the
    signal at the ``pwrite`` after the short one (nothing runs after it, as with kill -9).
    """
    # a v1 store, as the FILE_LIMIT arithmetic below was laid out for (the Store-v2 path of
    # repair is tested in tests/storage/test_store_v2_reader.py)
    command = serve_command(data_dir, socket_path, "--compaction", "off")
    if die_on_limit:
        # Python ignores SIGXFSZ at start-up: restore the default inside the server process
        command = [command[0], "-c",
                   "import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                   "from tay.cli import main; sys.exit(main(sys.argv[1:]))", *command[3:]]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    with open(log_path, "ab") as log:
        return subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log, preexec_fn=limit,
                                env={**os.environ, "PYTHONPATH": str(REPO)})


async def enqueue_until_refused(socket_path: str) -> tuple[dict[str, dict], dict | None]:
    return await wire.enqueue_until_refused(socket_path, task="sw.job", pad=PAD,
                                            limit=10 * FILE_LIMIT // PAD,
                                            what="the file-size limit")


def wait_listening(process: subprocess.Popen, socket_path: str, log: Path) -> None:
    for _ in range(750):
        if socket_accepts(socket_path):
            return
        if process.poll() is not None:
            break
        asyncio.run(asyncio.sleep(0.02))
    raise AssertionError("server did not start:\n" + log.read_text(errors="replace"))


def restart_keeps_every_ack(root: Path, data_dir: Path, acked: dict[str, dict],
                            *extra: str) -> None:
    """``inspect`` counts every acknowledged job; a restarted server (``extra`` flags) has
    each of them."""
    summary = inspect_store(data_dir)
    assert summary["jobs"] == len(acked), summary
    restarted = ServerProcess(data_dir, str(root / "again.sock"), root / "again.log",
                              *extra).start()
    try:
        asyncio.run(statuses(restarted.socket_path, acked))
    finally:
        restarted.stop()


async def statuses(socket_path: str, acked: dict[str, dict]) -> None:
    client = await WireClient.connect(socket_path)
    try:
        for job in acked.values():
            reply = await client.request("status", job_id=job["id"])
            assert reply["type"] == "status" and reply["job"]["args"] == job["args"], reply
    finally:
        await client.close()


def test_short_write_at_the_limit_is_cut_back_and_restart_keeps_every_ack(root):
    data_dir, log = root / "data", root / "limited.log"
    socket_path = str(root / "limited.sock")
    server = limited_server(data_dir, socket_path, log, die_on_limit=False)
    try:
        wait_listening(server, socket_path, log)
        acked, refusal = asyncio.run(enqueue_until_refused(socket_path))
        # the request whose write failed: its outcome is unknown to the server itself
        assert refusal is not None and refusal["error"]["code"] == "unknown_outcome", refusal
        assert len(acked) >= 5
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 1  # the writer stopped: exit 1, never degraded
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "append_failed" in log.read_text(errors="replace")  # EFBIG stopped the writer
    active = sorted(Path(history_dir(str(data_dir))).iterdir())[-1]
    assert active.stat().st_size < FILE_LIMIT  # the partial frame is gone
    restart_keeps_every_ack(root, data_dir, acked)


def test_process_killed_mid_write_leaves_a_torn_tail_that_repair_removes(root):
    """SIGXFSZ with its default action kills the server at the ``pwrite`` after the short
    one: no cut-back runs, exactly as with kill -9 in the middle of a multi-page write. The
    restart refuses and names ``tay storage repair``; the repair removes only the torn
    record; the restart then keeps every acknowledged job."""
    data_dir, log = root / "data", root / "killed.log"
    socket_path = str(root / "killed.sock")
    server = limited_server(data_dir, socket_path, log, die_on_limit=True)
    try:
        wait_listening(server, socket_path, log)
        acked, refusal = asyncio.run(enqueue_until_refused(socket_path))
        assert refusal is None  # the connection dropped: the process died
        assert server.wait(timeout=20) == -signal.SIGXFSZ
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    active = sorted(Path(history_dir(str(data_dir))).iterdir())[-1]
    assert active.stat().st_size == FILE_LIMIT  # the kernel wrote up to the limit

    refused = subprocess.run(serve_command(data_dir, str(root / "refused.sock")), cwd=REPO,
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode == 1
    assert "incomplete_tail" in refused.stderr, refused.stderr
    assert f"tay storage repair --data-dir {data_dir}" in refused.stderr

    done = subprocess.run([sys.executable, "-m", "tay.cli", "storage", "repair", "--data-dir",
                           str(data_dir), "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["repaired"] and report["path"] == str(active)
    assert report["offset"] + report["removed_bytes"] == FILE_LIMIT
    torn = Path(report["side_file"]).read_bytes()
    assert len(torn) == report["removed_bytes"] and torn[:4] == b"TAY\0"
    frame_size = 28 + int.from_bytes(torn[16:20], "big")  # the declared payload length
    assert PAD < len(torn) < frame_size  # one frame, cut short

    restart_keeps_every_ack(root, data_dir, acked)
