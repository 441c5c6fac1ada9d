"""kill -9 of a strict-sync ``tay serve`` while an online compaction runs under load.

Producers enqueue and a worker completes jobs while the operator's ``compact`` request is
in flight (and a small automatic trigger compacts again and again); the server is killed
at a seeded moment of that compaction (some land while the candidate is written, some at
the switch, some after it). After the restart exactly one CURRENT is authoritative (the
store opens, ``inspect`` reads one epoch), nothing acknowledged was lost or rewritten, and
every job still completes exactly once more at most.

The same checks follow a kill at fixed steps of the compaction (the capture, the candidate's
base, the epoch's publication, CURRENT staged, just before and just after the switch, the
reclaim): the server kills itself before that disk operation of its second compaction
(``tests.crash.serve_kill_at``) while the load goes on, so every step is reached on every
run instead of by chance of the delay.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tay.admin.client import SocketAdmin
from tests.crash.cluster import (
    REPO, ServerProcess, inspect_after_kill, inspect_store, serve_command,
)
from tests.crash.ledger import Ledger, produce, work
from tests.crash.test_kill9 import run_both_lives, second_life

# seed -> extra serve arguments: the automatic trigger small enough to fire under the load
TRIGGER = ("--compact-history-bytes", "64KiB", "--compact-ratio", "1.1")
ROUNDS = [(41, ()), (42, TRIGGER), (43, TRIGGER + ("--journal-writer", "python"))]


def request_compaction(socket_path: str, outcome: dict) -> threading.Thread:
    """The admin ``compact`` request on a thread (the kill usually cuts it off)."""
    def call() -> None:
        started = time.monotonic()
        try:
            outcome["report"] = SocketAdmin(socket_path, timeout_s=30).call("compact", {})
        except Exception as error:  # noqa: BLE001 - the kill cuts the request off
            outcome["error"] = repr(error)
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


async def load_and_one_compaction(server: ServerProcess, ledger: Ledger,
                                  rng: random.Random) -> tuple[asyncio.Event, list, float]:
    """A retained set, then producers and a worker running, and one compaction to
    completion under that load: (the event that stops the load, its tasks, how long the
    compaction took in seconds)."""
    sock = server.socket_path
    stop = asyncio.Event()
    # a retained set first, so the candidate takes a while to write
    await asyncio.gather(*(produce(sock, ledger, p, 120, rng, "b") for p in range(3)))
    tasks = [asyncio.ensure_future(work(sock, ledger, 0, rng.randint(4, 32), stop))]
    tasks += [asyncio.ensure_future(produce(sock, ledger, p, 150, rng, "o"))
              for p in range(3, 6)]
    await ledger.reached("load running", lambda l: len(l.completed) >= 20, timeout=30)
    first: dict = {}
    await asyncio.get_running_loop().run_in_executor(None, request_compaction(sock, first).join)
    assert "report" in first, first
    return stop, tasks, first["seconds"]


async def first_life(server: ServerProcess, ledger: Ledger, rng: random.Random) -> str:
    # one compaction to completion measures how long one takes under this load; the next
    # is killed at a seeded fraction of that (the candidate, the switch or the reclaim)
    stop, tasks, seconds = await load_and_one_compaction(server, ledger, rng)
    outcome: dict = {}
    requester = request_compaction(server.socket_path, outcome)
    delay = rng.uniform(0.05, 1.0) * seconds
    await asyncio.sleep(delay)
    server.kill9()
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
    requester.join(30)
    return (f"a compaction took {seconds * 1000:.0f} ms; the next was killed after "
            f"{delay * 1000:.0f} ms ({'published' if 'report' in outcome else 'cut off'})")


def one_authority(data_dir: Path, after_kill: bool = False) -> dict:
    """The store opens on exactly the epoch CURRENT names; no candidate is selected
    (``after_kill``: a torn final record is repaired first, ``inspect_after_kill``)."""
    report = (inspect_after_kill if after_kill else inspect_store)(data_dir)
    assert report["ok"] and report["store_version"] == 2, report
    epochs = os.listdir(data_dir / "epochs")
    assert f"e-{report['epoch_id']}" in epochs, (report, epochs)
    print(f"  on disk: epoch {report['epoch_id'][:8]}, entries {sorted(epochs)}")
    return report


def kill_then_restart(server: ServerProcess, first: Callable[..., Awaitable[str]],
                      rng: random.Random, label: str) -> None:
    """Both lives of a kill -9 test: ``first`` loads the server until it is killed, the
    store must then read as one authority, and a second life completes every job; a clean
    stop, then every acknowledged job must have completed."""
    ledger = Ledger()

    async def scenario() -> None:
        server.start()
        moment = await first(server, ledger, rng)
        print(f"{label} ({moment}): acked={len(ledger.acked)} unknown={len(ledger.unknown)} "
              f"completed={len(ledger.completed)}")
        one_authority(server.data_dir, after_kill=True)
        await second_life(server, ledger, rng)

    report = run_both_lives(server, scenario, timeout_s=120, final=one_authority)
    assert report["job_states"]["completed"] == len(ledger.job_ids()), report


@pytest.mark.parametrize("seed,extra", ROUNDS, ids=[str(seed) for seed, _ in ROUNDS])
def test_kill9_during_online_compaction_keeps_every_acknowledgement(scratch, seed, extra):
    server = ServerProcess(scratch / "data", str(scratch / "tay.sock"), scratch / "server.log",
                           *extra)
    kill_then_restart(server, first_life, random.Random(seed), f"seed={seed}")


# (kind, name): the first such operation of the second compaction kills the server
STEPS = [
    ("write", "SEGMENT-LEDGER"),  # the capture: the source sealed, its successor recorded
    ("open_create", "MANIFEST"),  # the candidate's base written
    ("rename", "e-"),  # the epoch published, not selected
    ("open_create", ".tay-current-"),  # CURRENT being staged
    ("rename_replace", "CURRENT"),  # just before the switch
    ("open_create", ".tay-store-"),  # just after it: the new tail's journal opening
    ("unlink", "0"),  # the reclaim of the old epoch's segments
    ("rmdir", "e-"),  # the old epoch's directory
]


class StepKilledServer(ServerProcess):
    """The first life runs ``tests.crash.serve_kill_at``, armed by ``arm_file``; restarts
    are plain ``tay serve``."""

    def __init__(self, *args, step: tuple[str, str], arm_file: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.step: tuple[str, str] | None = step
        self.arm_file = arm_file

    def spawn(self):
        if self.step is None:
            return super().spawn()
        command = [sys.executable, "-m", "tests.crash.serve_kill_at", *self.step,
                   str(self.arm_file), "--",
                   *serve_command(self.data_dir, self.socket_path, *self.extra)[3:]]
        self.step = None
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log,
                                            env={**os.environ, "PYTHONPATH": str(REPO)})
        return self.process


async def first_life_killed_at_step(server: StepKilledServer, ledger: Ledger,
                                    rng: random.Random) -> str:
    """The load of ``first_life`` and one compaction; then the server is armed, and the
    next compaction that starts kills it at its step. A request that joined a compaction
    the automatic trigger started before the arming gets its report: the next request
    starts an armed one."""
    stop, tasks, _ = await load_and_one_compaction(server, ledger, rng)
    server.arm_file.touch()
    process = server.process
    assert process is not None
    loop = asyncio.get_running_loop()
    for _ in range(3):
        outcome: dict = {}
        await loop.run_in_executor(None, request_compaction(server.socket_path, outcome).join)
        if "report" not in outcome:
            break
    code = await loop.run_in_executor(None, process.wait, 30)
    server.process = None
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
    assert code == -signal.SIGKILL, (code, outcome)  # the step was reached
    return "cut off"


@pytest.mark.parametrize("step", STEPS, ids=[f"{kind}-{name}" for kind, name in STEPS])
def test_kill9_at_each_step_of_an_online_compaction_under_load(scratch, step):
    seed, extra = ROUNDS[-1]  # the automatic trigger too, and the Python journal writer
    server = StepKilledServer(scratch / "data", str(scratch / "tay.sock"),
                              scratch / "server.log", *extra, step=step,
                              arm_file=scratch / "arm")
    kill_then_restart(server, first_life_killed_at_step, random.Random(seed),
                      f"killed before {step}")
