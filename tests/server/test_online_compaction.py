"""Online compaction in process: a real store, engine, driver and committer (both journal
writers) on an asyncio loop; the compactor's clock is injected, so retention is exact.

The candidate is prepared on a worker thread held at a gate while the test writes through
the driver, so the catch-up is deterministic: the switch must carry those writes into the
new epoch, and a restart must recover exactly the engine's state.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import tempfile
import time
import weakref

import pytest

from tay.engine import commands
from tay.engine.config import EngineConfig
from tay.engine.epoch import EpochEngine
from tay.failures import RecoveryRefused
from tay.server.compaction import compactor as compactor_module
from tay.server.app import ServeConfig, open_store
from tay.server.compaction.compactor import CompactionFailed, OnlineCompactor
from tay.server.driver import EngineDriver
from tay.server.metrics import ServerMetrics
from tay.storage.compaction import online, publish
from tay.storage.compaction.trigger import CompactionPolicy
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.manifest import Retention
from tests.engine.test_lazy_rows import all_entries
from tests.scratch import scratch_root

HOUR_MS = 3_600_000
ONE_HOUR = Retention("hours", 1)


def scratch_store():
    """A store directory under the scratch root (strict sync refuses /tmp), removed after."""
    scratch = scratch_root()
    scratch.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="online-", dir=scratch)
    yield f"{root}/data"
    shutil.rmtree(root, ignore_errors=True)


data_dir = pytest.fixture(scratch_store, name="data_dir")


def config(data_dir: str, writer: str = "auto", engine: EngineConfig | None = None,
           **policy: object) -> ServeConfig:
    return ServeConfig(data_dir=data_dir, socket=None, init_if_missing=True,
                       durability="write", journal_writer=writer,
                       engine=engine or EngineConfig(), terminal_retention=ONE_HOUR,
                       compaction=CompactionPolicy(**policy))


class Harness:
    """One open store served by a driver on the running loop; replies by request id."""

    def __init__(self, data_dir: str, writer: str, clock_offset_ms: int = 0,
                 engine: EngineConfig | None = None, **policy: object) -> None:
        self.store = open_store(config(data_dir, writer, engine, **policy))
        self.loop = asyncio.get_running_loop()
        self.driver = EngineDriver(self.store.engine, self.store.committer, self.loop)
        self.replies: dict[str, object] = {}
        self.waiters: dict[str, asyncio.Future] = {}
        self.driver.attach("p", self._sink)
        self.metrics = ServerMetrics()
        self.compactor = OnlineCompactor(
            self.driver, self.store, config(data_dir, writer, engine, **policy), self.metrics, clock=lambda: compactor_module.wall_ms() + clock_offset_ms)
        self.count = 0

    def _sink(self, effect) -> None:
        waiter = self.waiters.pop(effect.request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(effect)

    async def call(self, command_of):
        self.count += 1
        request_id = f"r{self.count}"
        waiter = self.waiters[request_id] = self.loop.create_future()
        self.driver.submit(command_of(request_id))
        return await asyncio.wait_for(waiter, 10)

    async def enqueue(self, n: int, queue: str = "default") -> str:
        reply = await self.call(lambda rid: commands.Enqueue(
            "p", rid, "t.v1", {"n": n}, {"queue": queue}))
        return reply.fields["job_id"]

    async def cancel(self, job_id: str) -> None:
        reply = await self.call(lambda rid: commands.Cancel("p", rid, job_id))
        assert reply.type != "error", reply

    async def failed_compaction(self, task: asyncio.Future | None = None) -> CompactionFailed:
        """What a compaction that must fail raised (``task``, else an admin compaction)."""
        with pytest.raises(CompactionFailed) as failed:
            await (task if task is not None else self.compactor.request("admin"))
        return failed.value

    async def admin(self, op: str, **body):
        return await self.call(lambda rid: commands.Admin("p", rid, op, body))

    async def automatic_compaction(self, timeout_s: float = 5.0) -> dict | None:
        """The report of the compaction the trigger starts within ``timeout_s`` (else None)."""
        deadline = time.monotonic() + timeout_s
        while self.compactor.last is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.compactor.last

    def jobs(self) -> dict[bytes, object]:
        return every_job(self.store.engine)

    def close(self) -> None:
        self.compactor._closed = True
        if self.compactor._timer is not None:
            self.compactor._timer.cancel()
        self.driver.close()
        self.store.close()


def queue_control(engine) -> tuple[set[str], dict[str, int], set[str]]:
    """The paused queues, the credits set at runtime and the paused schedules."""
    return set(engine.paused), dict(engine.scaled), set(engine.schedules.paused)


def every_job(engine) -> dict[bytes, object]:
    """Each job's state by id, the finished jobs a recovery holds in columns included."""
    return {job_id: entry.state for job_id, entry in all_entries(engine).items()}


def reopen(data_dir: str):
    store = open_store(config(data_dir))
    try:
        engine = store.engine
        return (every_job(engine), queue_control(engine), store.journal.epoch_id,
                dict(engine.epoch.entities))
    finally:
        store.close()


class Gate:
    """Holds ``online.prepare`` (in the compaction process the server forks) until the test
    opens it: two pipes, made before the fork, cross it."""

    def __init__(self, monkeypatch) -> None:
        entered_r, entered_w = os.pipe()
        open_r, open_w = os.pipe()
        self._entered, self._open = entered_r, open_w
        real = online.prepare

        def held(capture, **options):
            os.write(entered_w, b"e")
            assert select.select([open_r], [], [], 20)[0], "the gate was never opened"
            return real(capture, **options)

        monkeypatch.setattr(online, "prepare", held)
        weakref.finalize(self, _close_all, (entered_r, entered_w, open_r, open_w))

    async def wait_entered(self) -> None:
        while not select.select([self._entered], [], [], 0)[0]:
            await asyncio.sleep(0.005)
        os.read(self._entered, 1)

    def release(self) -> None:
        os.write(self._open, b"o")


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("writer,ahead", [("python", False), ("c", True)])
def test_writes_during_an_online_compaction_reach_the_new_epoch(data_dir, writer, ahead,
                                                                 monkeypatch):
    """``ahead``: the catch-up is copied in rounds before the switch (all of it here)."""
    gate = Gate(monkeypatch)
    if ahead:
        monkeypatch.setattr(compactor_module, "SWITCH_RECORDS", 0)

    async def scenario():
        h = Harness(data_dir, writer, clock_offset_ms=2 * HOUR_MS)
        try:
            ids = [await h.enqueue(n) for n in range(6)]  # available, orders 1..6
            await h.cancel(ids[0])
            await h.cancel(ids[5])  # the highest order leaves: the allocator is ahead
            await h.admin("pause_queue", queue="held")
            await h.admin("scale_queue", queue="held", concurrency=3)
            for name in ("nightly", "hourly"):  # not due in the test
                await h.call(lambda rid, name=name: commands.Schedule("p", rid, {
                    "declaration_id": name, "task": "t", "every": {"hours": 1},
                    "delay": 3_600}))
            await h.admin("pause_schedule", schedule_id="nightly")
            before_epoch = h.store.journal.epoch_id
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            # written while the candidate is prepared: the catch-up
            during = [await h.enqueue(10 + n) for n in range(3)]
            await h.cancel(during[0])
            await h.admin("pause_queue", queue="later")
            await h.admin("resume_queue", queue="held")
            await h.admin("scale_queue", queue="held", concurrency=None)
            await h.admin("scale_queue", queue="later", concurrency=5)
            await h.admin("resume_schedule", schedule_id="nightly")
            await h.admin("pause_schedule", schedule_id="hourly")
            await h.admin("retry_job", job_id=during[0])  # a cancelled job requeued
            gate.release()
            report = await task
            after = [await h.enqueue(20 + n) for n in range(2)]  # into the new tail
            live = h.jobs()
            paused = queue_control(h.store.engine)
            entities = dict(h.store.engine.epoch.entities)
            return report, before_epoch, ids, during, after, live, paused, entities
        finally:
            h.close()

    report, before_epoch, ids, during, after, live, paused, entities = asyncio.run(scenario())
    assert report["expired_jobs"] == 2 and report["retained_jobs"] == 4
    assert report["catch_up_records"] >= 7 and report["reclaimed"] is True
    assert (report["switch_records"] == 0) == ahead
    assert report["source_epoch_id"] == before_epoch.hex() != report["epoch_id"]
    # the cancelled jobs expired (captured two hours after they ended, retention 1 h)
    assert bytes.fromhex(ids[0]) not in live and bytes.fromhex(ids[5]) not in live
    # orders given out since the capture (7..10 live) moved down with the allocator: the
    # first one made available after it takes the order right above the kept ones (2..5)
    kept_orders = sorted(state.ready_order for job_id, state in live.items()
                         if job_id.hex() in ids and state.ready_order is not None)
    assert kept_orders == [2, 3, 4, 5]
    new_orders = [live[bytes.fromhex(job_id)].ready_order for job_id in during + after]
    assert new_orders == [9, 7, 8, 10, 11]  # during[0]: cancelled, then requeued
    assert paused == ({"later"}, {"later": 5}, {"hourly"})
    # a restart opens the new epoch and recovers exactly what the engine held
    recovered, recovered_paused, epoch_id, recovered_entities = reopen(data_dir)
    assert epoch_id.hex() == report["epoch_id"]
    assert recovered == live and recovered_paused == paused
    assert recovered_entities == entities
    epochs = os.listdir(os.path.join(data_dir, v2_layout.EPOCHS_DIR))
    assert epochs == [v2_layout.epoch_dir_name(epoch_id)]  # the source was reclaimed


def test_deleted_jobs_leave_the_store_and_their_ids_are_free(data_dir, monkeypatch):
    """A job deleted before a compaction is not in its base, so no file of the store holds
    its args after it; one deleted during it (the base holds it, the catch-up deletes it)
    and one deleted and enqueued again under the same id reach the new epoch as the engine
    holds them, and a restart recovers exactly that."""
    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            async def enqueue(args, **options):
                reply = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", args,
                                                                  options))
                return reply.fields["job_id"]

            gone = await enqueue({"card": "secret-4242"})
            await h.cancel(gone)
            deleted = await h.admin("delete_job", job_id=gone)
            assert deleted.fields["deleted"] is True
            later, reused = await enqueue({"n": 1}), await enqueue({"n": 2})
            for job_id in (later, reused):
                await h.cancel(job_id)
            task = h.compactor.request("admin")
            await gate.wait_entered()
            for job_id in (later, reused):  # the catch-up: the base holds both
                assert (await h.admin("delete_job", job_id=job_id)).fields["deleted"]
            assert await enqueue({"n": 3}, id=reused) == reused
            gate.release()
            report = await task
            return gone, later, reused, report, h.jobs()
        finally:
            h.close()

    gone, later, reused, report, live = asyncio.run(scenario())
    assert report["retained_jobs"] == 2 and report["reclaimed"] is True
    assert bytes.fromhex(gone) not in live and bytes.fromhex(later) not in live
    again = live[bytes.fromhex(reused)]
    assert again.state == "available" and again.definition["args"] == {"n": 3}
    recovered, _, epoch_id, _ = reopen(data_dir)
    assert epoch_id.hex() == report["epoch_id"] and recovered == live
    for folder, _, names in os.walk(data_dir):
        for name in names:
            with open(os.path.join(folder, name), "rb") as file:
                assert b"secret-4242" not in file.read(), name


def test_an_expired_job_retried_during_the_compaction_supersedes_it(data_dir, monkeypatch):
    """An operator retries a job the plan expires while the compaction runs: the switch
    does not publish (the old epoch stays authoritative, still serving), the attempt counts
    as superseded, not failed (nothing to alert on), and the next one, seconds later,
    keeps the job and publishes."""
    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "auto", clock_offset_ms=2 * HOUR_MS)
        try:
            job = await h.enqueue(1)
            await h.cancel(job)
            epoch = h.store.journal.epoch_id
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            await h.admin("retry_job", job_id=job)  # the plan expires it; now it is back
            gate.release()
            failed = await h.failed_compaction(task)
            assert failed.reason == "expired_job_changed"
            assert h.store.journal.epoch_id == epoch and h.driver.stopped is None
            # superseded, not failed: no failure counted, the next attempt in seconds
            assert h.compactor.failures == 0 and h.compactor.superseded == 1
            assert 0 < h.compactor.retry_at - time.monotonic() \
                <= compactor_module.SUPERSEDED_FIRST_S
            assert h.compactor.last_failure["outcome"] == "superseded"
            assert h.compactor.facts()["compaction"]["consecutive_superseded"] == 1
            assert h.metrics.compactions == {"superseded": 1}
            late = await h.enqueue(2)  # still serving, into the old epoch
            assert h.store.journal.epoch_id == epoch
            again = await h.compactor.request("admin", ONE_HOUR)  # the job is not expired now
            return (job, late, h.jobs(), again, h.compactor.superseded,
                    dict(h.metrics.compactions))
        finally:
            h.close()

    job, late, live, again, superseded, outcomes = asyncio.run(scenario())
    assert live[bytes.fromhex(job)].state == "available"
    assert again["retained_jobs"] == 2 and again["expired_jobs"] == 0 and superseded == 0
    assert outcomes == {"superseded": 1, "published": 1}
    recovered, _, epoch_id, _ = reopen(data_dir)
    assert epoch_id.hex() == again["epoch_id"] and recovered == live
    assert bytes.fromhex(late) in recovered
    names = os.listdir(os.path.join(data_dir, v2_layout.EPOCHS_DIR))
    assert [n for n in names if n.startswith(".tay-candidate")] == []


@pytest.mark.parametrize("ahead", [False, True])
def test_an_expired_job_deleted_during_the_compaction_does_not_fail_it(data_dir, ahead,
                                                                      monkeypatch):
    """The plan expires three cancelled jobs; meanwhile an operator deletes them (a bulk
    delete of old jobs) and enqueues a new job under two of their ids, cancelled too (the
    revision the plan expires), one of them deleted again. The catch-up drops the first
    deletion of each (their jobs are not in the new base: the state they give is the
    base's own) and keeps the new job's, so the compaction publishes, the new job under
    the reused id is not expired with the old one, and a restart recovers exactly what the
    engine holds. ``ahead``: the catch-up is copied in rounds before the switch."""
    gate = Gate(monkeypatch)
    if ahead:
        monkeypatch.setattr(compactor_module, "SWITCH_RECORDS", 0)

    async def scenario():
        h = Harness(data_dir, "auto", clock_offset_ms=2 * HOUR_MS)
        try:
            gone, reused, twice, kept = [await h.enqueue(n) for n in range(4)]
            for job_id in (gone, reused, twice):
                await h.cancel(job_id)
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            for job_id in (gone, reused, twice):
                assert (await h.admin("delete_job", job_id=job_id)).fields["deleted"]
            for job_id in (reused, twice):
                reply = await h.call(lambda rid, job_id=job_id: commands.Enqueue(
                    "p", rid, "t.v1", {"n": 4}, {"id": job_id}))
                assert reply.fields["job_id"] == job_id
                await h.cancel(job_id)
            assert (await h.admin("delete_job", job_id=twice)).fields["deleted"]
            gate.release()
            report = await task
            live = h.jobs()
            assert bytes.fromhex(twice) not in live
            return gone, reused, kept, report, live, h.metrics.compactions
        finally:
            h.close()

    gone, reused, kept, report, live, outcomes = asyncio.run(scenario())
    assert outcomes == {"published": 1} and report["reclaimed"] is True  # step 10 agreed
    assert report["expired_jobs"] == 0 and report["retained_jobs"] == 1
    assert (report["switch_records"] == 0) == ahead
    assert bytes.fromhex(gone) not in live and live[bytes.fromhex(kept)].state == "available"
    again = live[bytes.fromhex(reused)]
    assert again.state == "cancelled" and again.definition["args"] == {"n": 4}
    recovered, _, epoch_id, _ = reopen(data_dir)
    assert epoch_id.hex() == report["epoch_id"] and recovered == live


def test_a_refused_candidate_leaves_the_store_serving_and_the_next_attempt_publishes(
        data_dir, monkeypatch, tmp_path):
    real = online.admit_space
    refused = tmp_path / "refused"  # the compaction process is a fork: a file remembers

    def no_space(io, root, estimate, segments, cap=None):
        if not refused.exists():
            refused.touch()
            raise RecoveryRefused("resource_limit", "insufficient_space", path=root,
                                  stage="compaction", required=estimate, available=0)
        return real(io, root, estimate, segments, cap)

    monkeypatch.setattr(online, "admit_space", no_space)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            jobs = [await h.enqueue(n) for n in range(3)]
            epoch = h.store.journal.epoch_id
            failed = await h.failed_compaction()
            assert failed.reason == "insufficient_space"
            assert h.store.journal.epoch_id == epoch
            assert h.compactor.last_failure["retry_in_s"] == compactor_module.BACKOFF_FIRST_S
            jobs.append(await h.enqueue(9))
            report = await h.compactor.request("admin")
            assert h.compactor.failures == 0 and h.metrics.compactions == {
                "failed": 1, "published": 1}
            assert h.metrics.compaction.count == 1 and h.metrics.compaction_pause.count == 1
            return jobs, report, h.jobs()
        finally:
            h.close()

    jobs, report, live = asyncio.run(scenario())
    assert report["retained_jobs"] == 4 and report["expired_jobs"] == 0
    recovered, _, epoch_id, _ = reopen(data_dir)
    assert epoch_id.hex() == report["epoch_id"] and recovered == live


def test_an_uncertain_current_switch_stops_writing_for_good(data_dir, monkeypatch):
    def broken(io, root, new, previous):
        raise OSError(5, "injected EIO at the CURRENT rename")

    async def scenario():
        h = Harness(data_dir, "auto")
        monkeypatch.setattr(publish, "switch_current", broken)  # after the adoption
        try:
            job = await h.enqueue(1)
            await h.failed_compaction()
            assert h.driver.stopped is not None
            assert h.driver.stopped.reason == "compaction_switch_uncertain"
            refused = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {}, {}))
            assert refused.failure.code == "unavailable"
            return job
        finally:
            h.close()

    job = asyncio.run(scenario())
    recovered, _, _, _ = reopen(data_dir)  # the old CURRENT still names a whole epoch
    assert bytes.fromhex(job) in recovered


def test_the_trigger_compacts_once_the_history_passes_its_size_and_ratio(data_dir):
    async def scenario():
        h = Harness(data_dir, "auto", history_bytes=2048, ratio=1.1, check_interval_s=0.02)
        try:
            first = h.store.journal.epoch_id
            h.compactor.start()
            await asyncio.sleep(0.1)
            assert h.compactor.last is None  # the adopted empty store is far below 2 KiB
            for n in range(12):
                await h.enqueue(n)
            assert await h.automatic_compaction() is not None
            # the trigger may fire before the last enqueues land and again after them (the
            # tail passes the ratio): the store and the engine match the last report
            await settle(h)
            report = h.compactor.last
            assert report["trigger"] == "automatic"
            assert h.store.journal.epoch_id.hex() == report["epoch_id"] != first.hex()
            assert h.store.base_bytes == report["base_bytes"] > 0
            return h.jobs()
        finally:
            h.close()

    live = asyncio.run(scenario())
    recovered, _, _, _ = reopen(data_dir)
    assert recovered == live and len(live) == 12


def test_a_tail_of_jobs_deleted_by_hand_compacts_on_its_own(data_dir, monkeypatch):
    """An operator deletes every finished job: no terminal job is left for the retention
    trigger, and the history trigger waits for its size. The dead-tail trigger compacts
    once the tail outgrows the retained state by its ratio, so a restart replays a small
    base instead of the tail."""
    from tay.storage.compaction import trigger

    monkeypatch.setattr(trigger, "DEAD_TAIL_MIN_BYTES", 8192)

    async def scenario():
        h = Harness(data_dir, "auto", check_interval_s=0.02)
        try:
            h.compactor.start()
            kept = await h.enqueue(0)
            ids = [await h.enqueue(n) for n in range(1, 100)]
            for job_id in ids:
                await h.cancel(job_id)
            await asyncio.sleep(0.1)
            assert h.compactor.last is None  # 100 jobs retained: their charge outweighs it
            deleted = await h.admin("delete_jobs", state="cancelled")
            assert deleted.fields["deleted"] == 99
            report = await h.automatic_compaction()
            assert report is not None and report["trigger"] == "dead_tail"
            assert report["retained_jobs"] == 1
            await settle(h)
            assert h.compactor.last is report  # the new tail is small: not due again
            return kept, h.jobs()
        finally:
            h.close()

    kept, live = asyncio.run(scenario())
    recovered, _, _, _ = reopen(data_dir)
    assert recovered == live and set(live) == {bytes.fromhex(kept)}


def test_a_state_budget_that_refuses_work_asks_for_a_compaction(data_dir):
    async def scenario():
        h = Harness(data_dir, "auto", clock_offset_ms=2 * HOUR_MS,
                    engine=EngineConfig(max_state_bytes=12_000), check_interval_s=0.02)
        try:
            done = []
            while True:
                reply = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {}, {}))
                if getattr(reply, "type", None) != "enqueued":
                    assert reply.failure.code == "capacity"
                    break
                done.append(reply.fields["job_id"])
                await h.cancel(done[-1])  # terminal: the one-hour retention expires it
            h.compactor.start()
            report = await h.automatic_compaction()
            assert report["trigger"] == "state_budget" and report["expired_jobs"] == len(done)
            again = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {}, {}))
            assert again.type == "enqueued"  # the expired jobs gave their charge back
        finally:
            h.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("writer", ["python", "c"])
def test_a_published_epoch_that_does_not_match_the_engine_stops_writing(data_dir, writer,
                                                                       monkeypatch):
    from tay.storage.compaction.verify import mismatch

    def differs(*args):
        raise mismatch("job", job_id="00" * 16, step="catch_up")

    monkeypatch.setattr(online, "verify_totals", differs)

    async def scenario():
        h = Harness(data_dir, writer)
        try:
            job = await h.enqueue(1)
            failed = await h.failed_compaction()
            assert failed.reason == "verification_mismatch"
            assert h.driver.stopped.reason == "compaction_mismatch"
            assert h.metrics.compactions == {"verification_failed": 1}
            refused = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {}, {}))
            assert refused.failure.code == "unavailable"
            return job, h.store.journal.epoch_id
        finally:
            h.close()

    job, epoch = asyncio.run(scenario())
    recovered, _, epoch_id, _ = reopen(data_dir)  # the published epoch is authoritative
    assert epoch_id == epoch and bytes.fromhex(job) in recovered


async def fill_state(h: Harness, fraction: float, cancel: bool = True) -> list[str]:
    """Enqueue (and cancel: terminal) jobs until the retained state passes ``fraction`` of
    the budget; none may be refused."""
    budget = h.store.engine.budget
    jobs = []
    while budget.used < fraction * budget.limit:
        reply = await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {}, {}))
        assert reply.type == "enqueued", reply
        jobs.append(reply.fields["job_id"])
        if cancel:
            await h.cancel(jobs[-1])
    return jobs


async def settle(h: Harness, checks: int = 15) -> None:
    await asyncio.sleep(checks * h.compactor.policy.check_interval_s)
    while h.compactor._running is not None:
        await asyncio.sleep(0.01)


def test_the_state_trigger_compacts_before_the_budget_refuses(data_dir):
    async def scenario():
        now = [compactor_module.wall_ms()]
        h = Harness(data_dir, "auto", engine=EngineConfig(max_state_bytes=48_000),
                    check_interval_s=0.02)
        h.compactor.clock = lambda: now[0]
        try:
            h.compactor.start()
            await asyncio.sleep(0.1)
            assert h.compactor.last is None  # an empty engine is below the ratio
            # cancelled now, inside the one-hour retention: the trigger may look as the
            # fill passes the ratio, with its last job not yet cancelled, and find nothing
            done = await fill_state(h, 0.5)
            now[0] += 2 * HOUR_MS  # every job (all cancelled by now) past its retention
            report = await h.automatic_compaction()
            assert report is not None and report["trigger"] == "state_ratio"
            assert report["expired_jobs"] == len(done)
            assert h.store.engine.budget.refusals == 0 and h.store.engine.budget.used == 0
            assert h.compactor.facts()["compaction"]["trigger_state_ratio"] == 0.5
            return h.jobs()
        finally:
            h.close()

    live = asyncio.run(scenario())
    recovered, _, _, _ = reopen(data_dir)
    assert recovered == live == {}


def test_the_state_trigger_waits_for_the_earliest_expiry_instead_of_looping(data_dir):
    async def scenario():
        now = [compactor_module.wall_ms()]
        h = Harness(data_dir, "auto", engine=EngineConfig(max_state_bytes=48_000),
                    check_interval_s=0.02)
        h.compactor.clock = lambda: now[0]
        trigger = h.compactor.state_trigger
        try:
            h.compactor.start()
            done = await fill_state(h, 0.5)  # terminal, but inside the one-hour retention
            await settle(h)
            assert h.compactor.last is None and trigger.looks == 1  # one look, then quiet
            now[0] += HOUR_MS - 60_000  # not yet
            await settle(h)
            assert h.compactor.last is None and trigger.looks == 1
            now[0] += 120_000  # every job's retention passed (cancelled within seconds)
            report = await h.automatic_compaction()
            assert report["trigger"] == "state_ratio" and report["expired_jobs"] == len(done)
            assert trigger.looks == 2
        finally:
            h.close()

    asyncio.run(scenario())


def test_live_jobs_above_the_state_ratio_do_not_compact_in_a_loop(data_dir):
    async def scenario():
        h = Harness(data_dir, "auto", clock_offset_ms=2 * HOUR_MS,
                    engine=EngineConfig(max_state_bytes=48_000), check_interval_s=0.02)
        trigger = h.compactor.state_trigger
        try:
            h.compactor.start()
            await fill_state(h, 0.5, cancel=False)  # available jobs: nothing can expire
            await settle(h)
            assert h.compactor.last is None and trigger.looks == 1
            await fill_state(h, 0.5 + 1 / 32, cancel=False)  # grew by more than 1/64
            await settle(h)
            assert h.compactor.last is None and trigger.looks == 2
            assert h.store.engine.budget.refusals == 0
        finally:
            h.close()

    asyncio.run(scenario())


def test_a_compaction_after_a_restart_writes_the_same_records_with_or_without_rows(data_dir):
    """A restart keeps a base's terminal jobs as rows (tay.storage.v2.rows); the next
    online compaction builds them on capture and writes exactly what it writes after an
    eager restart (same records, byte for byte)."""
    from tay.engine.effects import Execute
    from tay.storage.recovery.recover import recover

    async def build() -> None:
        h = Harness(data_dir, "auto")
        executes: list[Execute] = []
        h.driver.attach("w", lambda effect: executes.append(effect)
                        if isinstance(effect, Execute) else None)
        try:
            h.driver.submit(commands.Connect("w", "worker", "rt", 2, None, "c1"))
            h.driver.submit(commands.RegisterTasks("w", ("t.v1",), "c2"))
            for n in range(2):  # two run, with results; none is left executing
                await h.enqueue(n)
            while len(executes) < 2:
                await asyncio.sleep(0.01)
            for n, execute in enumerate(executes):
                h.driver.submit(commands.Succeeded("w", f"s{n}", execute.reservation_id,
                                                   execute.execution_id, {"n": n}))
            h.driver.submit(commands.Disconnect("w"))
            ids = [await h.enqueue(n) for n in range(2, 8)]
            await h.cancel(ids[4])
            await h.cancel(ids[5])
            await h.compactor.request("admin", ONE_HOUR)  # a base of terminal and live jobs
        finally:
            h.close()

    asyncio.run(build())

    def compact_copy(eager: bool) -> list[tuple[int, int, int, bytes]]:
        copy = f"{data_dir}-{'eager' if eager else 'rows'}"
        shutil.copytree(data_dir, copy)
        method = EpochEngine.epoch_install_row
        if eager:
            del EpochEngine.epoch_install_row
        try:
            async def again() -> None:
                h = Harness(copy, "auto")
                try:
                    # rows, or held in columns (tay.engine.retained.finished)
                    engine = h.store.engine
                    lazy = sum(1 for entry in engine.jobs.values()
                               if type(entry).__name__ == "LazyJobEntry") + len(engine.finished)
                    # two completed, two cancelled, and four available held as rows
                    assert lazy == (0 if eager else 8)
                    await h.compactor.request("admin", ONE_HOUR)
                finally:
                    h.close()

            asyncio.run(again())
        finally:
            if eager:
                EpochEngine.epoch_install_row = method
        records: list[tuple[int, int, int, bytes]] = []
        recover(copy, consumer=lambda s, t, k, payload: records.append(
            (s, t, k, bytes(payload))), activate=False)
        shutil.rmtree(copy)
        return records

    with_rows, eager = compact_copy(False), compact_copy(True)
    assert with_rows == eager and len(with_rows) >= 8


# ---- --compact-on-stop: a clean stop's snapshot -------------------------------------------

def test_a_clean_stop_compacts_when_asked_and_the_tail_is_worth_it(data_dir):
    from tay.storage.compaction.trigger import STOP_MIN_TAIL_BYTES

    async def life(on_stop: bool, jobs: int):
        h = Harness(data_dir, "auto", on_stop=on_stop)
        try:
            for n in range(jobs):
                await h.enqueue(n)
            epoch = h.store.journal.epoch_id
            report = await h.compactor.at_stop()
            return report, epoch, h.jobs(), h.store.base_bytes
        finally:
            h.close()

    # not asked: the tail stays as it is
    report, epoch, live, _ = asyncio.run(life(False, 40))
    assert report is None and reopen(data_dir)[2] == epoch
    # asked, with a tail of 40 jobs over an empty base: the stop leaves a new epoch whose
    # tail is empty, and a restart recovers exactly what the engine held
    report, epoch, live, base_bytes = asyncio.run(life(True, 0))
    assert report["trigger"] == "stop" and report["source_epoch_id"] == epoch.hex()
    recovered, _, new_epoch, _ = reopen(data_dir)
    assert new_epoch.hex() == report["epoch_id"] and recovered == live and len(live) == 40
    segments = os.path.join(data_dir, v2_layout.EPOCHS_DIR,
                            v2_layout.epoch_dir_name(new_epoch), "segments")
    assert sum(os.path.getsize(os.path.join(segments, name))
               for name in os.listdir(segments)) - base_bytes < STOP_MIN_TAIL_BYTES
    # a stop right after: the tail holds almost nothing (the restart's own records), so
    # the base is not rewritten
    report, epoch, _, _ = asyncio.run(life(True, 1))
    assert report is None and reopen(data_dir)[2] == epoch == new_epoch


def test_stop_due_needs_the_option_a_tail_of_4_kib_and_a_sixteenth_of_the_base():
    policy = CompactionPolicy(on_stop=True)
    assert not CompactionPolicy().stop_due(10**6, 0)
    assert not CompactionPolicy(enabled=False, on_stop=True).stop_due(10**6, 0)
    assert policy.stop_due(4096, 0) and not policy.stop_due(4095, 0)
    assert policy.stop_due(17 * 2**20, 16 * 2**20)
    assert not policy.stop_due(17 * 2**20 - 1, 16 * 2**20)


def every_state(engine) -> dict[bytes, object]:
    """Every job's JobState, held ones (in columns or packed) built without taking them out."""
    states = {job_id: entry.state for job_id, entry in engine.jobs.items()}
    for job_id in engine.finished.stamps:
        states[job_id] = engine._finished_entry(job_id).state
    return states


def recovered_states(data_dir: str) -> dict[bytes, object]:
    """``every_state`` of the store at ``data_dir`` as a restart recovers it."""
    store = open_store(config(data_dir))
    try:
        return every_state(store.engine)
    finally:
        store.close()


def pack_all(engine) -> None:
    """Two packing rounds: every job finished so far is packed (tay.engine.retained.packed)."""
    engine.pack_finished(10_000)
    engine.pack_finished(10_000)


async def packed_cancels(h, enqueued: int, cancelled: int) -> list[str]:
    """``enqueued`` jobs with packing on, the first ``cancelled`` of them cancelled and
    packed; their ids."""
    h.store.engine.start_packing()
    ids = [await h.enqueue(n) for n in range(enqueued)]
    for job_id in ids[:cancelled]:
        await h.cancel(job_id)
    pack_all(h.store.engine)
    return ids


def test_packed_jobs_expire_and_carry_through_an_online_compaction(data_dir, monkeypatch):
    """Jobs a running server packed are captured, expired and caught up like any other: a
    packed job read during the compaction (taken out) still expires, one packed during it
    reaches the new epoch, and a restart recovers exactly the jobs the engine holds."""
    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "c", clock_offset_ms=2 * HOUR_MS)
        engine = h.store.engine
        try:
            ids = await packed_cancels(h, 6, 4)
            assert set(engine.finished.packed) == {bytes.fromhex(i) for i in ids[:4]}
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            read = await h.call(lambda rid: commands.Status("p", rid, ids[0]))
            assert read.fields["job"]["state"] == "cancelled", read
            await h.cancel(ids[4])
            pack_all(engine)
            gate.release()
            report = await task
            pack_all(engine)  # the switch took the jobs the catch-up touched out: again
            return report, ids, every_state(engine), set(engine.finished.packed)
        finally:
            h.close()

    report, ids, live, packed = asyncio.run(scenario())
    assert report["expired_jobs"] == 4 and report["retained_jobs"] == 2
    assert set(live) == {bytes.fromhex(ids[4]), bytes.fromhex(ids[5])}
    assert packed == {bytes.fromhex(ids[4])} and live[bytes.fromhex(ids[4])].state == "cancelled"
    assert recovered_states(data_dir) == live


def test_packed_jobs_deleted_in_bulk_during_an_online_compaction(data_dir, monkeypatch):
    """An operator's bulk deletion (``delete_jobs``) of jobs a running server packed, during
    an online compaction: each is deleted where it is held, none taken out first; the
    deletions of the jobs the plan expires leave the catch-up as any deletion's do, the
    deletion of one packed after the capture reaches the new epoch, and a restart
    recovers exactly what the engine holds."""
    gate = Gate(monkeypatch)
    built: list = []
    thaw = EpochEngine._thaw
    monkeypatch.setattr(EpochEngine, "_thaw",
                        lambda self, job_id: built.append(job_id) or thaw(self, job_id))

    async def scenario():
        h = Harness(data_dir, "c", clock_offset_ms=2 * HOUR_MS)
        engine = h.store.engine
        try:
            ids = await packed_cancels(h, 6, 4)
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            await h.cancel(ids[4])  # finished after the capture, packed before the deletion
            pack_all(engine)
            assert set(engine.finished.packed) == {bytes.fromhex(i) for i in ids[:5]}
            deleted = await h.admin("delete_jobs", state="cancelled")
            assert deleted.fields["deleted"] == 5 and built == []
            gate.release()
            report = await task
            return report, ids, every_state(engine), h.metrics.compactions
        finally:
            h.close()

    report, ids, live, outcomes = asyncio.run(scenario())
    assert outcomes == {"published": 1} and report["reclaimed"] is True  # step 10 agreed
    assert report["expired_jobs"] == 0 and report["retained_jobs"] == 2
    assert set(live) == {bytes.fromhex(ids[5])}
    assert recovered_states(data_dir) == live


def park_all(engine) -> None:
    """Two parking rounds: every job waiting so far is parked (ParkedJobEntry)."""
    engine.park_waiting(10_000)
    engine.park_waiting(10_000)


def test_parked_jobs_carry_through_an_online_compaction_and_a_restart(data_dir, monkeypatch):
    """Waiting jobs a running server parked are captured as their tuples and stay parked;
    jobs enqueued during the compaction and parked before its switch have their ready
    order moved down in their tuple; one taken out meanwhile (its state built, as a
    dispatch does; a status read leaves it parked) stays out; and a restart recovers
    exactly the jobs the engine holds, in the same ready order."""
    from tay.engine.retained.jobs import ParkedJobEntry, peek

    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "c", clock_offset_ms=2 * HOUR_MS)
        engine = h.store.engine
        try:
            engine.start_parking()
            ids = [await h.enqueue(n) for n in range(6)]
            for job_id in [await h.enqueue(n) for n in range(3)]:  # the highest orders
                await h.cancel(job_id)  # expire: later orders move down in the new epoch
            await h.call(lambda rid: commands.Enqueue("p", rid, "t.v1", {"n": "later"},
                                                      {"delay_ms": 3_600_000}))
            park_all(engine)
            assert sum(type(e) is ParkedJobEntry for e in engine.jobs.values()) == 7
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            ids += [await h.enqueue(n) for n in range(6, 9)]
            read = await h.call(lambda rid: commands.Status("p", rid, ids[2]))
            assert read.fields["job"]["state"] == "available", read
            assert type(engine.jobs[bytes.fromhex(ids[2])]) is ParkedJobEntry  # a read
            engine.jobs[bytes.fromhex(ids[2])].state  # built and kept, as a dispatch does
            park_all(engine)
            gate.release()
            report = await task
            kinds = {job_id.hex(): type(entry) for job_id, entry in engine.jobs.items()}
            orders = {job_id.hex(): peek(entry).ready_order
                      for job_id, entry in engine.jobs.items()}
            return report, ids, kinds, orders, every_state(engine)
        finally:
            h.close()

    report, ids, kinds, orders, live = asyncio.run(scenario())
    assert report["retained_jobs"] == 7 and report["expired_jobs"] == 3
    assert [kinds[job_id].__name__ for job_id in ids] == ["ParkedJobEntry"] * 2 + [
        "JobEntry"] + ["ParkedJobEntry"] * 6
    assert [orders[job_id] for job_id in ids] == sorted(orders[job_id] for job_id in ids)
    assert recovered_states(data_dir) == live

def test_the_switch_verifies_touched_jobs_without_taking_them_out(data_dir, monkeypatch):
    """The jobs the catch-up touched are compared with the replay on the compaction's
    thread, built from what the engine holds: jobs packed or parked since the capture stay
    packed or parked through the switch (reading them there took each out of its tuple, with
    the loop stopped), and the verification still holds them to the replay."""
    from tay.engine.retained.jobs import ParkedJobEntry

    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "c")
        engine = h.store.engine
        try:
            engine.start_packing()
            engine.start_parking()
            task = h.compactor.request("admin", ONE_HOUR)
            await gate.wait_entered()
            cancelled = [await h.enqueue(n) for n in range(3)]
            for job_id in cancelled:
                await h.cancel(job_id)
            waiting = [await h.enqueue(n) for n in range(3, 5)]
            pack_all(engine)
            engine.park_waiting(10_000)
            engine.park_waiting(10_000)
            gate.release()
            report = await task
            packed = set(engine.finished.packed)
            parked = {job_id for job_id, entry in engine.jobs.items()
                      if type(entry) is ParkedJobEntry}
            return report, cancelled, waiting, packed, parked, every_state(engine)
        finally:
            h.close()

    report, cancelled, waiting, packed, parked, live = asyncio.run(scenario())
    assert report["catch_up_records"] >= 8
    assert packed == {bytes.fromhex(job_id) for job_id in cancelled}
    assert parked == {bytes.fromhex(job_id) for job_id in waiting}
    assert recovered_states(data_dir) == live

def test_the_rounds_pack_finished_jobs_and_drop_expired_volatile_ones(data_dir):
    """``tay serve``'s rounds (tay.server.finished_rounds) on a real store and driver:
    finished persistent jobs are packed; finished volatile ones stay until they expire under
    the store's terminal retention (the driver's clock moved two hours on), then go with
    their budget charge; persistent ones expire only at a compaction."""
    from tay.server.finished_rounds import FinishedRounds

    async def scenario():
        h = Harness(data_dir, "c")
        engine = h.store.engine
        ahead = [0]
        h.driver.wall_ms = lambda: compactor_module.wall_ms() + ahead[0]
        rounds = FinishedRounds(h.driver, h.store, interval_s=0.005)
        rounds.start()
        try:
            persistent = [await h.enqueue(n) for n in range(2)]
            volatile = []
            for n in range(2):
                reply = await h.call(lambda rid: commands.Enqueue(
                    "p", rid, "t.v1", {"n": n}, {"durability": "volatile"}))
                volatile.append(reply.fields["job_id"])
            for job_id in persistent + volatile:
                await h.cancel(job_id)
            charge = sum(engine.jobs[bytes.fromhex(job_id)].charge for job_id in persistent)
            deadline = time.monotonic() + 5
            while len(engine.finished.packed) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            packed = set(engine.finished.packed)
            await asyncio.sleep(0.05)  # rounds go on: the volatile jobs are kept an hour
            kept = engine.job_count()
            ahead[0] = 2 * HOUR_MS
            while engine.job_count() > 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            return packed, kept, engine.job_count(), engine.budget.used, charge, persistent
        finally:
            rounds.stop()
            h.close()

    packed, kept, left, used, charge, persistent = asyncio.run(scenario())
    assert packed == {bytes.fromhex(job_id) for job_id in persistent}
    assert kept == 4 and left == 2 and used == charge


def test_the_compared_fields_are_every_durable_field_but_the_definition_object() -> None:
    """``job_fields``, what a verification compares, tells apart two jobs that differ in
    any one field but the definition, which it compares by its canonical bytes."""
    from tay.storage.compaction.verify import job_fields
    from tay.storage.events.transitions import JobState

    job = JobState(b"\x01" * 16, {"args": [1]}, b"canonical", "completed", 3, 1, None, 1, 2,
                   None, None, 5, 6, 7, 8, None, True, None, None)
    for k, name in enumerate(JobState._fields):
        other = job._replace(**{name: ("changed", k)})
        if name == "definition":
            assert job_fields(other) == job_fields(job)
        else:
            assert job_fields(other) != job_fields(job), name


def _altered(job):
    from tay.storage.events.transitions import _evolve
    return _evolve(job, inserted_at=job.inserted_at - 1)


def _extra(jobs):
    """A copy of the finished job (no availability order to collide) after every other."""
    from tay.storage.events.transitions import _evolve
    return _evolve(next(job for job in jobs if job.terminal), id=b"\xff" * 16)


@pytest.mark.parametrize("change,what", [
    (lambda jobs: jobs[:1] + jobs[2:], "job"),  # the replay misses a planned job
    (lambda jobs: jobs[:-1], "job_count"),  # it misses the last
    (lambda jobs: jobs + [_extra(jobs)], "job_count"),  # it holds one more
    (lambda jobs: jobs[:1] + [_altered(jobs[1])] + jobs[2:], "job"),  # one field differs
])
def test_a_candidate_that_does_not_replay_to_the_plan_is_not_published(data_dir, monkeypatch,
                                                                        tmp_path, change, what):
    """The verification compares the replayed base with the plan job by job as it comes
    (``PlannedTable``), holding neither whole: a base written with a job missing, one too
    many or one field changed is refused, and the store keeps serving its epoch."""
    real = online.base_records
    monkeypatch.setattr(online, "base_records",
                        lambda jobs, checkpoints: real(change(list(jobs)), checkpoints))
    noted_in = tmp_path / "refusals"  # written in the compaction process (a fork)
    real_mismatch = online.mismatch

    def noted(kind, **extra):
        with open(noted_in, "a") as out:
            out.write(kind + "\n")
        return real_mismatch(kind, **extra)

    monkeypatch.setattr(online, "mismatch", noted)
    from tay.storage.compaction import verify
    monkeypatch.setattr(verify, "mismatch", noted)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            ids = [await h.enqueue(n) for n in range(4)]
            await h.cancel(ids[0])
            epoch = h.store.journal.epoch_id
            failed = await h.failed_compaction()
            assert failed.reason == "verification_mismatch"
            assert h.store.journal.epoch_id == epoch and h.driver.stopped is None
            ids.append(await h.enqueue(9))  # still serving
            return every_state(h.store.engine)
        finally:
            h.close()

    live = asyncio.run(scenario())
    assert noted_in.read_text().split() == [what] and len(live) == 5
    assert recovered_states(data_dir) == live


def test_an_online_compaction_holds_no_retained_job_twice(data_dir, monkeypatch, tmp_path):
    """While the candidate is verified, the retained jobs held packed are not built into
    objects that live on: the plan streams (each job built when written and when compared,
    then dropped), and the replay keeps none of the base's jobs. The compaction process
    freezes the heap it was forked with out of its collector, so what it counts is what it
    built itself."""
    import gc

    from tay.storage.events.transitions import JobState

    counted_in = tmp_path / "alive"  # written in the compaction process (a fork)
    real = online._replay

    def counted(*args):
        reducer = real(*args)
        gc.collect()
        counted_in.write_text(str(sum(1 for o in gc.get_objects() if type(o) is JobState)))
        return reducer

    monkeypatch.setattr(online, "_replay", counted)

    async def scenario():
        h = Harness(data_dir, "c")
        engine = h.store.engine
        try:
            await packed_cancels(h, 300, 290)
            assert len(engine.finished.packed) == 290
            gc.collect()
            before = sum(1 for o in gc.get_objects() if type(o) is JobState)
            report = await h.compactor.request("admin")
            return report, before, every_state(engine)
        finally:
            h.close()

    report, before, live = asyncio.run(scenario())
    assert report["retained_jobs"] == 300 and report["expired_jobs"] == 0
    alive = int(counted_in.read_text())
    assert alive <= 5 and before >= 5, (alive, before)  # not 290 more, nor 580
    assert recovered_states(data_dir) == live
