"""After a kill -9: two servers racing for one data dir (exactly one wins the owner lock),
and a torn tail (simulated on a copy) that ``tay serve`` refuses without changing a byte."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tay.bench.server import socket_accepts
from tay.storage.v2.layout import history_dir
from tests.crash.cluster import REPO, SCRATCH, ServerProcess, serve_command, tree_digest
from tests.crash.ledger import Ledger, produce
from tests.crash.wire import WireClient

HEADER_SIZE = 44


@pytest.fixture
def crashed_store():
    """A store with a few hundred acknowledged jobs whose server was killed with -9."""
    SCRATCH.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="crash-", dir=SCRATCH))
    server = ServerProcess(root / "data", str(root / "first.sock"), root / "first.log")
    ledger = Ledger()

    async def burst() -> None:
        server.start()
        rng = random.Random(7)
        producers = [asyncio.ensure_future(produce(server.socket_path, ledger, p, 200, rng, "t"))
                     for p in range(3)]
        # kill after some acknowledged work, however slow the machine (not after a delay)
        await ledger.reached("100 acknowledged enqueues", lambda l: len(l.acked) >= 100, timeout=30)
        server.kill9()
        await asyncio.gather(*producers)

    asyncio.run(burst())
    assert ledger.acked, server.log()
    yield root, ledger
    shutil.rmtree(root, ignore_errors=True)


def wait_for_one(contenders: list[tuple[subprocess.Popen, str]], timeout: float = 30) -> None:
    """Until some contender listens and every other one has exited (or all have exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listening = [sock for process, sock in contenders if socket_accepts(sock)]
        exited = [process for process, _ in contenders if process.poll() is not None]
        if listening and len(listening) + len(exited) == len(contenders):
            return
        if len(exited) == len(contenders):
            return
        time.sleep(0.02)
    raise AssertionError(f"no outcome of the lock race in {timeout}s: "
                         f"{[(p.poll(), socket_accepts(s)) for p, s in contenders]}")


def spawn(data_dir: Path, socket_path: str) -> subprocess.Popen:
    return subprocess.Popen(serve_command(data_dir, socket_path), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_servers_after_kill9_exactly_one_wins(crashed_store):
    root, ledger = crashed_store
    data_dir = root / "data"
    contenders = [(spawn(data_dir, str(root / f"race{i}.sock")), str(root / f"race{i}.sock"))
                  for i in range(2)]
    try:
        wait_for_one(contenders)
        winners = [(p, s) for p, s in contenders if p.poll() is None and socket_accepts(s)]
        losers = [p for p, _ in contenders if p.poll() is not None]
        assert len(winners) == 1 and len(losers) == 1, [p.poll() for p, _ in contenders]
        loser_error = losers[0].stderr.read().decode()
        assert losers[0].returncode != 0
        assert "ownership_busy" in loser_error and ".tay-owner.lock" in loser_error, loser_error

        # with the winner idle (no clients, nothing due), a third contender changes nothing
        before = tree_digest(data_dir)
        third = subprocess.run(serve_command(data_dir, str(root / "third.sock")), cwd=REPO,
                               capture_output=True, text=True, timeout=20)
        assert third.returncode != 0 and "ownership_busy" in third.stderr, third.stderr
        assert tree_digest(data_dir) == before
        assert not (root / "third.sock").exists()

        async def every_acked_job_is_served() -> None:
            client = await WireClient.connect(winners[0][1])
            for job in ledger.acked.values():
                reply = await client.request("status", job_id=job["id"])
                assert reply["type"] == "status" and reply["job"]["args"] == job["args"]
            await client.close()

        asyncio.run(every_acked_job_is_served())
    finally:
        for process, _ in contenders:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def test_torn_tail_on_a_copy_is_refused_without_changes(crashed_store):
    root, _ledger = crashed_store
    copy = root / "torn"
    shutil.copytree(root / "data", copy)
    active = sorted(Path(history_dir(str(copy))).iterdir())[-1]
    size = active.stat().st_size
    assert size > HEADER_SIZE + 3, "the killed server wrote no records"
    with open(active, "r+b") as handle:
        handle.truncate(size - 3)  # a frame cut short, as a torn write would leave it
    before = tree_digest(copy)
    done = subprocess.run(serve_command(copy, str(root / "torn.sock")), cwd=REPO,
                          capture_output=True, text=True, timeout=20)
    assert done.returncode != 0
    assert "incomplete_tail" in done.stderr and str(active) in done.stderr, done.stderr
    offset = int(re.search(r"offset (\d+)", done.stderr).group(1))
    assert HEADER_SIZE <= offset < size - 3, (offset, size)
    assert tree_digest(copy) == before
    assert not (root / "torn.sock").exists()
