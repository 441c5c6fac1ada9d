"""Finished base jobs held in columns read their snapshots and results from the base
segment when asked (tay.storage.v2.rows.HeldJobs): a read that fails or finds other bytes
refuses the request (``unavailable``) and returns nothing; a compaction copies the runs
before it reclaims the old base."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import pytest

from tay._native import _pure_base as bj
from tay.engine import Engine, commands
from tay.engine.config import EngineConfig
from tay.engine.effects import Refuse, Reply
from tay.server.app import ServeConfig, open_store
from tay.server.driver import mono_ms, wall_ms
from tay.storage.compaction.offline import compact_offline
from tay.storage.compaction.trigger import CompactionPolicy
from tay.storage.events import encode_event
from tay.storage.v2.manifest import Retention
from tay.storage.v2.rows import BaseReadFailed, HeldJobs
from tests.scratch import scratch_root

SCRATCH = scratch_root() / "held-base"


@pytest.fixture
def data_dir():
    SCRATCH.mkdir(parents=True, exist_ok=True)
    root = tempfile.mkdtemp(prefix="held-", dir=SCRATCH)
    yield f"{root}/data"
    shutil.rmtree(root, ignore_errors=True)


def config(data_dir: str) -> ServeConfig:
    return ServeConfig(data_dir=data_dir, socket=None, init_if_missing=True, durability="write",
                       engine=EngineConfig(), compaction=CompactionPolicy(enabled=True))


def run(store, command):
    outcome = store.engine.handle(command, wall_ms(), mono_ms())
    if outcome.events:
        store.committer.submit([(seq, e.type, e.schema, encode_event(e))
                                for seq, e in outcome.events]).result()
    return outcome


def compacted_store(data_dir: str, count: int = 6) -> list[bytes]:
    """``count`` cancelled jobs, compacted into a base; returns their ids."""
    store = open_store(config(data_dir))
    try:
        for n in range(count):
            run(store, commands.Enqueue("p", f"r{n}", "t.v1", {"n": n}, {}))
        ids = sorted(store.engine.jobs)
        for n, job_id in enumerate(ids):
            run(store, commands.Cancel("p", f"c{n}", job_id.hex()))
    finally:
        store.close()
    compact_offline(data_dir, consumer=Engine(EngineConfig()), retention=Retention("infinity"),
                    durability="write")
    return ids


def base_segment(data_dir: str) -> str:
    [path] = glob.glob(os.path.join(data_dir, "epochs", "e-*", "segments", "*1.tay"))
    return path


def status(store, job_id: bytes):
    [effect] = store.engine.handle(commands.Status("c", "s", job_id.hex()), wall_ms(),
                                   mono_ms()).effects
    return effect


def test_held_jobs_read_their_bytes_from_the_base_when_asked(data_dir) -> None:
    ids = compacted_store(data_dir)
    store = open_store(config(data_dir))
    try:
        finished = store.engine.finished
        assert len(finished) == len(ids)
        jobs, k = finished.where(ids[2])
        assert isinstance(jobs, HeldJobs) and jobs.data is None  # no copy was made
        reply = status(store, ids[2])
        assert isinstance(reply, Reply) and reply.fields["job"]["state"] == "cancelled"
    finally:
        store.close()


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_base_read_that_fails_refuses_the_request_and_changes_nothing(data_dir,
                                                                        damage) -> None:
    ids = compacted_store(data_dir)
    store = open_store(config(data_dir))
    try:
        engine = store.engine
        jobs, k = engine.finished.where(ids[3])
        snapshot = jobs.columns[k * bj.BASE_JOB + bj.SNAPSHOT]  # where its payload starts
        with open(base_segment(data_dir), "r+b") as handle:
            if damage == "flipped":  # in place, under the open descriptor
                handle.seek(snapshot + 40)
                byte = handle.read(1)
                handle.seek(snapshot + 40)
                handle.write(bytes([byte[0] ^ 0xFF]))
            else:
                handle.truncate(snapshot)
        counts = dict(engine.counts)
        refused = status(store, ids[3])
        assert isinstance(refused, Refuse)
        assert refused.failure.code == "unavailable"
        assert "could not be read" in refused.failure.message
        assert ids[3] in engine.finished and ids[3] not in engine.jobs  # still held, as it was
        assert dict(engine.counts) == counts
        with pytest.raises(BaseReadFailed):  # a compaction's copy refuses the same way
            engine.finished.load()
        if damage == "flipped":  # the other jobs still read (their records are intact)
            assert isinstance(status(store, ids[0]), Reply)
    finally:
        store.close()


def test_loading_copies_every_run_and_lets_the_segment_go(data_dir) -> None:
    """What a compaction does before it reclaims the old base: afterwards no run reads the
    segment (its descriptor is closed), so damage to the file changes no answer."""
    ids = compacted_store(data_dir)
    store = open_store(config(data_dir))
    try:
        path = base_segment(data_dir)
        inode = os.stat(path).st_ino

        def open_on_base() -> bool:
            fds = os.listdir("/proc/self/fd")
            return any(_inode(fd) == inode for fd in fds)

        assert open_on_base()
        before = [status(store, job_id).fields["job"] for job_id in ids[:2]]
        store.engine.finished.load()
        assert not open_on_base()
        os.truncate(path, 0)
        after = [status(store, job_id).fields["job"] for job_id in ids[:2]]
        assert after == before
        assert all(isinstance(status(store, job_id), Reply) for job_id in ids)
    finally:
        store.close()


def _inode(fd: str) -> int | None:
    try:
        return os.stat(f"/proc/self/fd/{fd}").st_ino
    except OSError:
        return None


def test_an_online_compaction_copies_the_held_runs_before_it_reclaims_the_old_base(
        data_dir) -> None:
    """The compactor loads every held run at its capture: the old base is reclaimed and no
    descriptor keeps it (its space is freed); the jobs answer as before. Retention is
    infinite, so the cancelled jobs stay."""
    import asyncio

    from tests.server.test_online_compaction import Harness

    ids = compacted_store(data_dir)
    old_base = base_segment(data_dir)
    inode = os.stat(old_base).st_ino

    async def scenario() -> None:
        h = Harness(data_dir, "auto")
        try:
            finished = h.store.engine.finished
            held = ids[2:]  # a status takes a job out of the columns: these stay in them
            assert all(finished.where(i)[0].data is None for i in held)
            before = [status(h.store, job_id).fields["job"] for job_id in ids[:2]]
            report = await h.compactor.request("admin", Retention("infinity"))
            assert report["reclaimed"] and not os.path.exists(old_base)
            assert all(finished.where(i)[0].data is not None for i in held)
            assert not any(_inode(fd) == inode for fd in os.listdir("/proc/self/fd"))
            assert [status(h.store, job_id).fields["job"] for job_id in ids[:2]] == before
            assert all(isinstance(status(h.store, job_id), Reply) for job_id in held)
        finally:
            h.close()

    asyncio.run(scenario())


def test_a_base_that_no_longer_reads_fails_the_online_compaction_and_changes_nothing(
        data_dir) -> None:
    import asyncio

    from tay.server.compaction.compactor import CompactionFailed
    from tests.server.test_online_compaction import Harness

    ids = compacted_store(data_dir)
    old_base = base_segment(data_dir)
    epoch = os.path.basename(os.path.dirname(os.path.dirname(old_base)))

    async def scenario() -> None:
        h = Harness(data_dir, "auto")
        try:
            os.truncate(old_base, 64)  # under the open descriptor
            with pytest.raises(CompactionFailed):
                await h.compactor.request("admin", Retention("infinity"))
            assert os.listdir(os.path.join(data_dir, "epochs")) == [epoch]  # nothing new
            assert ids[0] in h.store.engine.finished  # still held; the others still refuse
            assert isinstance(status(h.store, ids[0]), Refuse)
            job_id = await h.enqueue(1)  # writing goes on
            assert job_id
        finally:
            h.close()

    asyncio.run(scenario())
