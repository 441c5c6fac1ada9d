"""Cold backup and restore (``tay.storage.recovery.backup``): restore refuses a tampered
catalog or copy, a non-empty target and a copy that is not plain files, changing nothing; a
restored store holds every job and serves them through a real ``tay serve``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tay.failures import RecoveryRefused
from tay.storage.recovery.backup import CATALOG_NAME, backup_store, restore_store
from tests.crash.cluster import ServerProcess, tree_digest
from tests.crash.compaction_store import stored_state
from tests.crash.wire import WireClient
from tests.storage.test_store_v2_rules import compacted_store


@pytest.fixture
def backed_up(data_dir):
    """(store, backup, a fresh target path) around a compacted store with a tail."""
    root = compacted_store(data_dir)
    backup = data_dir.parent / f"{data_dir.name}-backup"
    target = data_dir.parent / f"{data_dir.name}-restored"
    backup_store(str(root), str(backup))
    yield root, backup, target
    for path in (backup, target):
        shutil.rmtree(path, ignore_errors=True)


def refused_restore(backup: Path, target: Path) -> RecoveryRefused:
    """restore refuses, and neither the backup nor the target (nor its parent) changes."""
    before = (tree_digest(backup), tree_digest(target) if target.exists() else None,
              sorted(os.listdir(target.parent)))
    with pytest.raises(RecoveryRefused) as caught:
        restore_store(str(backup), str(target))
    after = (tree_digest(backup), tree_digest(target) if target.exists() else None,
             sorted(os.listdir(target.parent)))
    assert after == before
    return caught.value


def _catalog(backup: Path) -> dict:
    return json.loads((backup / CATALOG_NAME).read_text())


def _write_catalog(backup: Path, catalog: dict) -> None:
    (backup / CATALOG_NAME).write_text(json.dumps(catalog))


def _a_segment(backup: Path) -> Path:
    return next(path for path in sorted(backup.rglob("*.tay")))


def _flip_last_byte(data: bytes) -> bytes:
    """The data with its last byte changed, whatever it was (setting it to 0x01 left a
    segment that ended in 0x01 as it was: one run in 256 did not tamper)."""
    return data[:-1] + bytes([data[-1] ^ 0x01])


@pytest.mark.parametrize("tamper, reason", [
    (lambda b: _write_catalog(b, {**_catalog(b), "files": [
        {**e, "sha256": "0" * 64} if e["path"] == "CURRENT" else e
        for e in _catalog(b)["files"]]}), "catalog_mismatch"),
    (lambda b: _write_catalog(b, {**_catalog(b), "files": [
        e for e in _catalog(b)["files"] if e["path"] != "CURRENT"]}), "catalog_files_differ"),
    (lambda b: _write_catalog(b, {**_catalog(b), "files": _catalog(b)["files"] + [
        {"path": "../outside", "bytes": 0, "sha256": "0" * 64}]}), "catalog_files_differ"),
    (lambda b: (b / CATALOG_NAME).write_text("{not json"), "catalog_unreadable"),
    (lambda b: _write_catalog(b, {**_catalog(b), "format": "other"}), "catalog_format"),
    (lambda b: (b / "epochs" / "extra").write_bytes(b"x"), "catalog_files_differ"),
    (lambda b: _a_segment(b).write_bytes(_flip_last_byte(_a_segment(b).read_bytes())),
     "catalog_mismatch"),
])
def test_restore_refuses_a_tampered_backup_and_creates_nothing(backed_up, tamper, reason):
    _, backup, target = backed_up
    tamper(backup)
    failure = refused_restore(backup, target)
    assert (failure.kind, failure.reason) == ("argument", reason)
    assert not target.exists()


def test_restore_refuses_a_copy_that_is_not_plain_files(backed_up):
    """A catalogued file replaced by a symlink to an identical file elsewhere: the bytes
    match, but a backup holds plain files only (the copy never follows links)."""
    root, backup, target = backed_up
    victim = _a_segment(backup)
    outside = backup.parent / f"{backup.name}-outside.tay"
    shutil.copyfile(victim, outside)
    victim.unlink()
    victim.symlink_to(outside)
    try:
        failure = refused_restore(backup, target)
    finally:
        outside.unlink()
    assert (failure.kind, failure.reason, failure.path) == (
        "argument", "catalog_not_a_regular_file", str(victim))
    assert not target.exists()


@pytest.mark.parametrize("occupy", [
    lambda t: (t.mkdir(), (t / "keep").write_text("mine")),
    lambda t: t.write_text("a file"),
])
def test_restore_refuses_a_target_that_is_not_empty(backed_up, occupy):
    _, backup, target = backed_up
    occupy(target)
    failure = refused_restore(backup, target)
    assert (failure.kind, failure.reason, failure.path) == (
        "argument", "target_not_empty", str(target))


def test_restore_into_an_empty_directory_gives_the_same_store(backed_up):
    root, backup, target = backed_up
    target.mkdir()
    report = restore_store(str(backup), str(target))
    assert report["store_version"] == 2
    assert stored_state(target) == stored_state(root)  # same epoch, every durable field
    assert sorted(os.listdir(target)) == [".tay-owner.lock", "CURRENT", "STORE", "STORE-V2",
                                          "epochs"]


def test_a_restored_store_serves_every_job(backed_up):
    """``tay serve`` (strict sync) on the restored copy answers status and result for every
    job the original store holds, as the original holds them."""
    root, backup, target = backed_up
    restore_store(str(backup), str(target))
    _, _, state = stored_state(root)
    with tempfile.TemporaryDirectory(prefix="tay-restore-") as sockets:  # a short path
        server = ServerProcess(target, os.path.join(sockets, "s.sock"),
                               target.parent / f"{target.name}.log")
        server.start()
        try:
            found = asyncio.run(_statuses(server.socket_path, list(state["jobs"])))
        finally:
            server.stop()
    assert set(found) == {job_id.hex() for job_id in state["jobs"]}
    now = time.time_ns() // 1_000_000
    for job_id, fields in state["jobs"].items():
        job, result = found[job_id.hex()]
        expected = fields[1]
        if expected in ("scheduled", "retryable") and fields[4] <= now:
            expected = "available"  # written at a fixed past clock: due by now
        assert job["state"] == expected, (job, fields)
        assert job["attempt"] == fields[2]
        if fields[1] == "completed":
            assert result == fields[11]


async def _statuses(socket_path: str, job_ids: list[bytes]) -> dict[str, tuple]:
    client = await WireClient.connect(socket_path)
    try:
        out = {}
        for job_id in job_ids:
            reply = await client.request("status", job_id=job_id.hex())
            assert reply["type"] == "status", reply
            result = None
            if reply["job"]["state"] == "completed":
                result = (await client.request("result", job_id=job_id.hex()))["result"]
            out[job_id.hex()] = (reply["job"], result)
        return out
    finally:
        await client.close()
