"""The engine driver's release order on a real store whose fdatasync the test holds.

A volatile job writes nothing, yet its reply (like a read's) must wait behind every
earlier persistent write; when that write's fsync fails, the pending write becomes
``unknown_outcome``, the waiting read and volatile replies ``unavailable``, and later
commands are refused without touching the engine.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest

from tay.engine import commands
from tay.engine.effects import Refuse, Reply
from tay.server.app import ServeConfig, open_store
from tay.server.driver import EngineDriver
from tests.scratch import scratch_root
from tests.storage.sync_gates import SyncGate

SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is
VOLATILE = {"durability": "volatile"}


@pytest.fixture(params=["c", "python"])
def gated_store(request):
    """A real store on either journal writer; every batch fsync waits for the test's gate."""
    SCRATCH.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="driver-", dir=SCRATCH)
    store = open_store(ServeConfig(data_dir=f"{root}/data", socket=None, init_if_missing=True,
                                   durability="sync", validated_filesystem=True,
                                   journal_writer=request.param))
    gate = SyncGate(store.committer, store.journal)
    yield store, gate
    gate.release()
    store.close()
    shutil.rmtree(root, ignore_errors=True)


def run_driver(store, scenario) -> list:
    """Run ``scenario(driver, delivered)`` on a loop; returns what reached the sink."""
    async def main() -> list:
        driver = EngineDriver(store.engine, store.committer, asyncio.get_running_loop())
        delivered: list = []
        driver.attach("c", delivered.append)
        try:
            await scenario(driver, delivered)
        finally:
            driver.close()
        return delivered
    return asyncio.run(main())


async def settle(driver: EngineDriver) -> None:
    for _ in range(500):
        if driver.idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("effects still waiting for durability")


def test_volatile_and_read_replies_wait_behind_an_earlier_persistent_write(gated_store):
    store, gate = gated_store

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.submit(commands.Enqueue("c", "persistent", "t.v1", {}, {}))
        assert await asyncio.to_thread(gate.entered)
        driver.submit(commands.Enqueue("c", "volatile", "t.v1", {}, VOLATILE))
        driver.submit(commands.Status("c", "read", "00" * 16))
        await asyncio.sleep(0.05)
        assert delivered == []  # nothing leaves before the first fsync returns
        gate.release()
        await settle(driver)

    delivered = run_driver(store, scenario)
    assert [effect.request_id for effect in delivered] == ["persistent", "volatile", "read"]
    assert [type(effect) for effect in delivered[:2]] == [Reply, Reply]
    assert store.committer.stats().events == 1  # the volatile job was never written


def test_a_read_with_nothing_waiting_is_answered_within_its_submit(gated_store):
    """A read stage alone in the queue is covered by any durable ticket: it leaves at once;
    one behind a write still waits for that write's fsync."""
    store, gate = gated_store

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.submit(commands.Status("c", "read", "00" * 16))
        assert [effect.request_id for effect in delivered] == ["read"]
        driver.submit(commands.Enqueue("c", "persistent", "t.v1", {}, {}))
        assert await asyncio.to_thread(gate.entered)
        driver.submit(commands.Status("c", "read-after", "00" * 16))
        await asyncio.sleep(0.05)
        assert [effect.request_id for effect in delivered] == ["read"]
        gate.release()
        await settle(driver)

    delivered = run_driver(store, scenario)
    assert [effect.request_id for effect in delivered] == ["read", "persistent", "read-after"]


def test_a_failed_fsync_fails_what_waits_and_refuses_what_follows(gated_store):
    store, gate = gated_store
    stopped: list[str] = []

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.add_stop_listener(lambda: stopped.append("stopped"))
        driver.submit(commands.Enqueue("c", "persistent", "t.v1", {}, {}))
        assert await asyncio.to_thread(gate.entered)
        driver.submit(commands.Enqueue("c", "volatile", "t.v1", {}, VOLATILE))
        driver.submit(commands.Status("c", "read", "00" * 16))
        gate.fail_held_sync(errno.EIO)
        gate.release()
        await settle(driver)
        await asyncio.sleep(0)  # stop listeners run on the next loop turn
        before = store.engine.next_sequence
        driver.submit(commands.Enqueue("c", "later", "t.v1", {}, {}))
        assert store.engine.next_sequence == before  # refused before the engine saw it

    delivered = run_driver(store, scenario)
    assert all(isinstance(effect, Refuse) for effect in delivered)
    assert [(e.request_id, e.failure.code) for e in delivered] == [
        ("persistent", "unknown_outcome"), ("volatile", "unavailable"),
        ("read", "unavailable"), ("later", "unavailable")]
    assert stopped == ["stopped"]


def test_a_client_permit_is_held_until_the_reply_is_released(gated_store):
    store, gate = gated_store
    permits = store.engine.permits

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.submit(commands.Enqueue("c", "first", "t.v1", {}, {}), admit_bytes=100)
        assert await asyncio.to_thread(gate.entered)
        assert permits.in_use == 1
        for n in range(permits.slots - 1):
            driver.submit(commands.Enqueue("c", f"more{n}", "t.v1", {}, VOLATILE), 10)
        driver.submit(commands.Enqueue("c", "refused", "t.v1", {}, VOLATILE), admit_bytes=10)
        driver.submit(commands.Status("c", "read", "00" * 16))  # reads need no permit
        assert permits.in_use == permits.slots
        gate.release()
        await settle(driver)
        assert permits.in_use == 0

    delivered = run_driver(store, scenario)
    refused = [e for e in delivered if isinstance(e, Refuse) and e.failure.code == "capacity"]
    assert [(e.request_id, e.failure.details["reason"]) for e in refused] == [
        ("refused", "client_slots")]
    assert delivered[-1].request_id == "read"  # answered, not refused for capacity


def test_permits_of_failed_stages_come_back_when_the_writer_stops(gated_store):
    store, gate = gated_store

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.submit(commands.Enqueue("c", "persistent", "t.v1", {}, {}), admit_bytes=10)
        assert await asyncio.to_thread(gate.entered)
        driver.submit(commands.Enqueue("c", "volatile", "t.v1", {}, VOLATILE), admit_bytes=10)
        assert store.engine.permits.in_use == 2
        gate.fail_held_sync(errno.EIO)
        gate.release()
        await settle(driver)

    delivered = run_driver(store, scenario)
    assert [(e.request_id, e.failure.code) for e in delivered] == [
        ("persistent", "unknown_outcome"), ("volatile", "unavailable")]
    assert store.engine.permits.in_use == 0


def test_an_enqueue_over_one_permits_bytes_is_client_bytes_and_holds_nothing(gated_store):
    store, _ = gated_store
    per_permit = store.engine.permits.bytes_per_permit

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        driver.submit(commands.Enqueue("c", "big", "t.v1", {}, {}), admit_bytes=per_permit + 1)
        await settle(driver)

    [refusal] = run_driver(store, scenario)
    assert (refusal.failure.code, refusal.failure.details["reason"]) == ("capacity",
                                                                          "client_bytes")
    assert store.engine.permits.in_use == 0 and store.engine.next_sequence == 1


@pytest.mark.parametrize("writer", ["c", "python"])
def test_group_commit_writes_a_turn_in_batches_of_at_most_max_events(writer):
    """Steps handled in one loop turn are held until the turn ends, then written in batches
    of at most ``max_events`` records; no reply leaves before its batch is durable."""
    SCRATCH.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="driver-", dir=SCRATCH)
    store = open_store(ServeConfig(data_dir=f"{root}/data", socket=None, init_if_missing=True,
                                   durability="sync", validated_filesystem=True,
                                   journal_writer=writer, group_commit_max_events=4))
    before = store.committer.stats()

    async def scenario(driver: EngineDriver, delivered: list) -> None:
        for index in range(10):  # one turn: no await in between
            driver.submit(commands.Enqueue("c", f"r{index}", "t.v1", {}, {}))
        assert delivered == []
        await settle(driver)

    try:
        delivered = run_driver(store, scenario)
        stats = store.committer.stats()
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    assert [effect.request_id for effect in delivered] == [f"r{index}" for index in range(10)]
    assert all(effect.type == "enqueued" for effect in delivered)
    assert stats.submissions - before.submissions == 10
    assert stats.events - before.events == 10
    assert stats.batches - before.batches >= 3 and stats.largest_batch <= 4


def test_wall_ms_gives_one_int_per_millisecond(monkeypatch) -> None:
    """Jobs stamped in one millisecond share their timestamp objects (retained memory)."""
    from tay.server import driver as driver_module

    clock = iter([1_700_000_000_123_400_000, 1_700_000_000_123_900_000,
                  1_700_000_000_124_000_001, 1_700_000_000_123_000_000])
    monkeypatch.setattr(driver_module.time, "time_ns", lambda: next(clock))
    first, second, third, back = (driver_module.wall_ms() for _ in range(4))
    assert first == second == 1_700_000_000_123 and first is second
    assert third == 1_700_000_000_124 and back == 1_700_000_000_123  # never stuck


def test_the_wakeup_timer_is_armed_from_a_fresh_clock_read():
    """The driver asks the engine's next wake-up at the end of every loop turn (no clock
    read per turn), but the timer's delay comes from a fresh read: a turn long after the
    last engine call still arms at the right time."""
    import os

    from tay.engine.effects import Outcome

    clock = {"wall": 1_700_000_000_000, "mono": 1_000}

    class Engine:
        permits = None
        wake = None

        def handle(self, command, now_ms, mono_ms):
            return Outcome(effects=[Reply("c", "r1", "accepted", {})])

        def next_wakeup(self):
            return self.wake

    class Committer:
        durable, holds, linger = 0, False, False

        def __init__(self):
            self.completion_fd, self._write_end = os.pipe()

    async def main():
        loop = asyncio.get_running_loop()
        engine, committer = Engine(), Committer()
        driver = EngineDriver(engine, committer, loop,
                              clock=(lambda: clock["wall"], lambda: clock["mono"]))
        delivered: list = []
        driver.attach("c", delivered.append)
        driver.submit(object())
        await asyncio.sleep(0)
        assert delivered and driver._wake_handle is None  # nothing to wake up for
        clock["mono"] = 9_000  # long after the last engine call
        engine.wake = 10_000
        driver.answer([])
        await asyncio.sleep(0)
        delay = driver._wake_handle.when() - loop.time()
        driver.close()
        os.close(committer.completion_fd)
        os.close(committer._write_end)
        return delay

    delay = asyncio.run(main())
    assert 0.9 < delay <= 1.0  # 10,000 - 9,000 ms, not 10,000 - 1,000


def test_a_completion_writes_what_it_released_at_once_one_write_per_connection(gated_store):
    """The frames of the stages a durable batch releases leave in the completion's own
    callback (not on a later loop turn), in one write per connection; before the batch's
    fsync returns, the same callback writes nothing."""
    from tay.protocol.limits import ProtocolLimits
    from tay.server.uds.connection import Connection
    from tay.server.uds.listener import Listener
    from tests.server.test_connection_writes import CountingTransport, frames

    store, gate = gated_store

    def frame(message: dict) -> bytes:
        payload = orjson.dumps({"version": 1, **message})
        return len(payload).to_bytes(4, "big") + payload

    async def main() -> None:
        loop = asyncio.get_running_loop()
        driver = EngineDriver(store.engine, store.committer, loop)
        connection = Connection(Listener(driver, ProtocolLimits()))
        transport = CountingTransport()
        connection.connection_made(transport)
        try:
            connection.data_received(frame({"type": "hello", "request_id": "h",
                                            "mode": "client", "runtime_id": "test"}))
            await settle(driver)
            await asyncio.sleep(0)
            transport.writes.clear()
            loop.remove_reader(store.committer.completion_fd)  # completions run by hand
            for request_id in ("a", "b"):
                connection.data_received(frame({"type": "enqueue", "request_id": request_id,
                                                "task": "t.v1", "args": {}}))
            assert await asyncio.to_thread(gate.entered)
            tickets = [stage[1] for stage in driver._stages]
            assert len(tickets) == 2 and all(tickets)
            await asyncio.sleep(0.02)
            driver._on_durable()  # the fsync is held: nothing is durable, nothing leaves
            await asyncio.sleep(0)
            assert transport.writes == []
            gate.release()
            await asyncio.to_thread(store.committer.wait, max(tickets), 10.0)
            driver._on_durable()
            assert driver.idle
            assert len(transport.writes) == 1  # written within the completion, together
            assert [(f["type"], f["request_id"]) for f in frames(transport.writes[0])] == [
                ("enqueued", "a"), ("enqueued", "b")]
        finally:
            driver.close()

    asyncio.run(main())
