"""kill -9 during the snapshot a clean stop takes (``tay serve --compact-on-stop``).

The stop's snapshot is the online compaction (``OnlineCompactor.at_stop``, storage.md §3.8)
on a server whose clients are gone. A dry run in process numbers every disk-changing
operation it makes through its I/O seam (``PowerCutIO``: the candidate's directories, base
segments, MANIFEST and tail, the epoch's rename, the CURRENT switch, the journal reopened
on the new tail, the reclaim's unlinks and directory fsyncs). Each case runs the same stop
in a subprocess that SIGKILLs itself before operation N (``tests/crash/kill_at.py``: a real
kill, the page cache kept), and then:

* the store recovers, as ``tay serve`` opens it, to exactly the durable state before the
  stop (the store's retention is infinity: nothing expires), from the old epoch if the kill
  came before the CURRENT switch, else from the new one; never from a candidate;
* the next clean stop with the option on leaves the same state, from a compacted epoch.

The template is the compaction crash matrix's ``v2`` store (a compacted store with a
tail: jobs in every state, a paused queue, a schedule), opened once so that its execution
left running is settled before the stop. ``TAY_CRASH_MATRIX=full``: every operation;
otherwise every third one plus those around the CURRENT switch.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tay.storage.compaction import trigger
from tay.storage.compaction.trigger import CompactionPolicy
from tay.storage.v2.markers import decode_current
from tests.crash.cluster import REPO
from tests.crash.compaction_store import engine_config, stored_state
from tests.crash.powercut import Plan, SharedCountIO
from tests.scratch import scratch_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FULL = os.environ.get("TAY_CRASH_MATRIX") == "full"


def serve_config(root: Path):
    from tay.server.app import ServeConfig

    return ServeConfig(data_dir=str(root), socket=None, durability="sync",
                       validated_filesystem=True, engine=engine_config(),
                       compaction=CompactionPolicy(on_stop=True))


def stop(root: Path, io=None) -> dict | None:
    """Open ``root`` as ``tay serve`` does and stop it cleanly with ``--compact-on-stop``:
    the snapshot's report, or None if none was due."""
    from tay.server.app import open_store
    from tay.server.compaction.compactor import OnlineCompactor
    from tay.server.driver import EngineDriver

    async def life() -> dict | None:
        config = serve_config(root)
        store = open_store(config)
        driver = EngineDriver(store.engine, store.committer, asyncio.get_running_loop())
        compactor = OnlineCompactor(driver, store, config, io=io)
        try:
            return await compactor.at_stop()
        finally:
            await compactor.close()
            driver.close()
            store.close()

    # the template's tail is a few KiB: below the production threshold, it must compact
    threshold, trigger.STOP_MIN_TAIL_BYTES = trigger.STOP_MIN_TAIL_BYTES, 1
    try:
        return asyncio.run(life())
    finally:
        trigger.STOP_MIN_TAIL_BYTES = threshold


def current_epoch(root: Path) -> bytes:
    return decode_current((root / "CURRENT").read_bytes()).epoch_id


@cache
def template() -> Path:
    from tests.crash.test_compaction_crash_matrix import template as matrix_template

    root = scratch_dir("stop-template-") / "data"
    shutil.copytree(matrix_template("v2"), root, symlinks=True)
    from tay.server.app import open_store

    open_store(serve_config(root)).close()  # settles the execution left running
    return root


def fresh_copy() -> Path:
    root = scratch_dir("stop-case-") / "data"
    shutil.copytree(template(), root, symlinks=True)
    return root


class DryRun:
    def __init__(self) -> None:
        root = fresh_copy()
        self.old_epoch = current_epoch(root)
        self.before = stored_state(root)[2]
        io = SharedCountIO()  # the compaction process counts its operations in it too
        report = stop(root, io)
        assert report is not None and report["trigger"] == "stop" and report["reclaimed"]
        assert stored_state(root) == (2, bytes.fromhex(report["epoch_id"]), self.before)
        self.plan = Plan(str(root), io.operations)
        self.switch = self.plan.first("rename_replace", "/CURRENT")
        shutil.rmtree(root.parent)


@cache
def dry_run() -> DryRun:
    return DryRun()


def indices() -> list[int]:
    run = dry_run()
    last = len(run.plan.operations)
    if FULL:
        return list(range(1, last + 1))
    chosen = set(range(1, last + 1, 3)) | {run.switch - 1, run.switch, run.switch + 1, last}
    return sorted(i for i in chosen if 1 <= i <= last)


def test_the_dry_run_compacts_and_switches_current() -> None:
    run = dry_run()
    kinds = [op.kind for op in run.plan.operations]
    assert "rename_replace" in kinds and kinds.count("fsync_dir") > 3
    assert 1 < run.switch < len(kinds)


def pytest_generate_tests(metafunc):
    if "crash_at" in metafunc.fixturenames:
        run = dry_run()
        chosen = indices()
        metafunc.parametrize("crash_at", chosen, ids=[
            f"{i}-{run.plan.operations[i - 1].kind}" for i in chosen])


def test_kill9_during_the_stop_snapshot_recovers_the_state_before_the_stop(crash_at) -> None:
    index = crash_at
    run = dry_run()
    root = fresh_copy()
    try:
        done = subprocess.run([sys.executable, "-m", "tests.crash.kill_at", str(root),
                               str(index), "stop"], cwd=REPO, capture_output=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
        version, epoch, state = stored_state(root)
        assert version == 2 and state == run.before
        if index <= run.switch:  # the replacing rename of CURRENT had not happened
            assert epoch == run.old_epoch
        else:
            assert epoch != run.old_epoch
        stop(root)  # the next clean stop: compacted again if the tail is worth it
        assert stored_state(root)[2] == run.before
        assert current_epoch(root) != run.old_epoch or index <= run.switch
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
