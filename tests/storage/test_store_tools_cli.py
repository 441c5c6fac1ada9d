"""``tay storage compact | backup | restore`` through a real subprocess (exit 0 done,
1 refused, 2 usage), on a store that holds jobs, a result, failure details, a paused queue
and a schedule: everything the engine keeps must come back."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tay.engine import Engine, EngineConfig, Execute
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.journal.writer import init_store
from tay.storage.layout import acquire_lock
from tay.storage.fsio import RealIO
from tay.storage.recovery.recover import recover

REPO = Path(__file__).resolve().parents[2]
T0 = time.time_ns() // 1_000_000  # now: a 24h retention keeps what the test writes


def tay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def populate(root: Path) -> dict[str, str]:
    """Write a v1 store through the engine: 3 completed jobs with results, one discarded
    with failure details, one waiting, a paused queue, a schedule."""
    init_store(str(root), durability="write")
    engine = Engine(EngineConfig(), random.Random(3))
    journal = recover(str(root), consumer=engine, durability="write").journal
    records = []

    def run(command, now=T0):
        out = engine.handle(command, now, 0)
        records.extend(out.events)
        return out

    run(c.Connect("w", "worker", "rt", 8, None, "h"))
    run(c.RegisterTasks("w", ("t",), "r"))
    ids = {}
    for n in range(3):
        (execute,) = [e for e in run(c.Enqueue("p", f"e{n}", "t", {"n": n}, {})).effects
                      if isinstance(e, Execute)]
        run(c.Succeeded("w", f"s{n}", execute.reservation_id, execute.execution_id, {"n": n}))
        ids[f"done{n}"] = execute.job_id
    (execute,) = [e for e in run(c.Enqueue("p", "f", "t", {}, {"retries": 0})).effects
                  if isinstance(e, Execute)]
    run(c.Failed("w", "ff", execute.reservation_id, execute.execution_id,
                 {"type": "KeyError", "message": "m"}))
    ids["failed"] = execute.job_id
    run(c.Admin("p", "pause", "pause_queue", {"queue": "slow"}))
    out = run(c.Enqueue("p", "wait", "t", {}, {"queue": "slow"}))
    ids["waiting"] = [e for e in out.effects if not isinstance(e, Execute)][0].fields["job_id"]
    run(c.Schedule("p", "sched", {"declaration_id": "nightly", "task": "t",
                                  "cron": "0 3 * * *"}))
    journal.append_batch(ev.journal_records(records))
    journal.sync()
    journal.close()
    return ids


def engine_of(root: Path) -> Engine:
    engine = Engine(EngineConfig())
    recovered = recover(str(root), consumer=engine, activate=False)
    if recovered.store_version == 2:
        engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
    return engine


def assert_same_state(root: Path, ids: dict[str, str]) -> None:
    engine = engine_of(root)
    assert engine.job(bytes.fromhex(ids["done1"])).result == {"n": 1}
    assert engine.job(bytes.fromhex(ids["failed"])).failure == {"type": "KeyError",
                                                                "message": "m"}
    assert engine.job(bytes.fromhex(ids["waiting"])).state == "available"
    assert engine.paused == {"slow"}
    assert list(engine.schedules.states()) == ["nightly"]


def test_compact_adopts_then_compacts_again_and_keeps_every_kind_of_state(data_dir):
    ids = populate(data_dir)
    done = tay("storage", "compact", "--data-dir", str(data_dir), "--durability", "write",
               "--json")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert first["ok"] and first["adopted"] and first["retained_jobs"] == 5
    assert first["terminal_retention"] == {"hours": 24}
    assert_same_state(data_dir, ids)
    done = tay("storage", "compact", "--data-dir", str(data_dir), "--durability", "write",
               "--terminal-retention", "infinity")
    assert done.returncode == 0 and "compacted" in done.stdout
    assert_same_state(data_dir, ids)
    inspect = json.loads(tay("storage", "inspect", "--data-dir", str(data_dir), "--json").stdout)
    assert inspect["store_version"] == 2 and inspect["terminal_retention"] == "infinity"


def test_compact_refusals_and_usage(data_dir):
    populate(data_dir)
    held = acquire_lock(RealIO(), str(data_dir), create=False, fsync_ancestors=False)
    try:
        busy = tay("storage", "compact", "--data-dir", str(data_dir), "--durability", "write")
        assert busy.returncode == 1 and "ownership_busy" in busy.stderr
    finally:
        held.release()
    strict = tay("storage", "compact", "--data-dir", str(data_dir))
    assert strict.returncode == 1 and "sync_requires_validated_filesystem" in strict.stderr
    usage = tay("storage", "compact", "--data-dir", str(data_dir), "--terminal-retention", "1y")
    assert usage.returncode == 2 and "--terminal-retention" in usage.stderr
    assert (data_dir / "segments").is_dir()  # nothing was adopted


def test_backup_then_restore_gives_a_store_that_opens_with_the_same_state(data_dir):
    ids = populate(data_dir)
    assert tay("storage", "compact", "--data-dir", str(data_dir),
               "--durability", "write").returncode == 0
    backup = data_dir.parent / f"{data_dir.name}-backup"
    restored = data_dir.parent / f"{data_dir.name}-restored"
    try:
        done = tay("storage", "backup", "--data-dir", str(data_dir), "--to", str(backup),
                   "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["jobs"] == 5 and report["store_version"] == 2
        catalog = json.loads((backup / "tay-backup.json").read_text())
        assert {entry["path"].split("/")[0] for entry in catalog["files"]} == {
            "STORE", "STORE-V2", "CURRENT", "epochs"}
        again = tay("storage", "backup", "--data-dir", str(data_dir), "--to", str(backup))
        assert again.returncode == 1 and "target_not_empty" in again.stderr
        done = tay("storage", "restore", "--from", str(backup), "--data-dir", str(restored))
        assert done.returncode == 0, done.stderr
        assert_same_state(restored, ids)
        # a damaged backup is refused before anything is created
        other = data_dir.parent / f"{data_dir.name}-other"
        victim = next(p for p in backup.rglob("*.tay"))
        # flip its last byte (writing 0x00 over it changed nothing when it already was 0)
        content = victim.read_bytes()
        victim.write_bytes(content[:-1] + bytes([content[-1] ^ 0xFF]))
        done = tay("storage", "restore", "--from", str(backup), "--data-dir", str(other))
        assert done.returncode == 1 and "catalog_mismatch" in done.stderr
        assert not other.exists()
    finally:
        import shutil

        for path in (backup, restored):
            shutil.rmtree(path, ignore_errors=True)


def test_backup_refuses_while_an_engine_owns_the_store(data_dir):
    populate(data_dir)
    held = acquire_lock(RealIO(), str(data_dir), create=False, fsync_ancestors=False)
    target = data_dir.parent / f"{data_dir.name}-b"
    try:
        done = tay("storage", "backup", "--data-dir", str(data_dir), "--to", str(target))
        assert done.returncode == 1 and "ownership_busy" in done.stderr
        assert not target.exists()
    finally:
        held.release()
