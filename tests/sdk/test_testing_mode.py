"""``tay.testing.InMemoryEngine``: the real engine in the test process, no socket."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from tay import ServerError, Tay, TayHTTP, TayHTTPWorker
from tay.errors import ConnectionLost, RemoteTaskError
from tay.testing import InMemoryEngine

NO_SOCKET = "/nonexistent-tay-dir/tay.sock"  # proves nothing connects to a socket


def app() -> tuple[Tay, dict[str, list[object]]]:
    tay = Tay(socket_path=NO_SOCKET, capacity=2)
    seen: dict[str, list[object]] = {"add": [], "flaky": []}

    @tay.task(name="app.add.v1")
    def add(left: int, right: int) -> dict:
        seen["add"].append((left, right))
        return {"sum": left + right}

    @tay.task(name="app.flaky.v1", retries=2)
    async def flaky(order: str) -> str:
        seen["flaky"].append(order)
        if len(seen["flaky"]) < 3:
            raise RuntimeError("gateway timeout")
        return f"captured {order}"

    return tay, seen


def test_an_enqueued_task_runs_in_process_with_the_engines_semantics(run):
    async def scenario():
        tay, seen = app()
        async with InMemoryEngine() as engine:
            engine.attach(tay)
            async with tay:
                job = await tay.tasks["app.add.v1"].enqueue(2, 5)
                assert await job.result(timeout=5) == {"sum": 7} and seen["add"] == [(2, 5)]
                first = await tay.enqueue("app.add.v1", {"left": 1, "right": 1}, submission_id="once")
                again = await tay.enqueue("app.add.v1", {"left": 1, "right": 1}, submission_id="once")
                assert first.id == again.id
                with pytest.raises(ServerError) as conflict:
                    await tay.enqueue("app.add.v1", {"left": 9, "right": 1}, submission_id="once")
                assert conflict.value.code == "invalid_enqueue"
                with pytest.raises(ServerError) as refused:
                    await tay.enqueue("app.add.v1", {"left": 1, "right": 1}, priority=5)
                assert refused.value.code == "invalid_enqueue"
                assert engine.committer.records > 0 and not os.path.exists(NO_SOCKET)

    run(scenario())


def test_retries_and_delays_follow_the_engine_clock_not_the_wall_clock(run):
    async def scenario():
        tay, seen = app()
        async with InMemoryEngine() as engine:
            engine.attach(tay)
            async with tay:
                job = await tay.tasks["app.flaky.v1"].enqueue("o-1")
                for _ in range(2):  # backoff 1 s then 2 s (+ jitter), skipped by advance
                    while await job.status() != "retryable":
                        await asyncio.sleep(0.005)
                    await engine.advance(3)
                assert await job.result(timeout=5) == "captured o-1" and len(seen["flaky"]) == 3
                later = await tay.enqueue("app.add.v1", {"left": 3, "right": 4}, delay=3600)
                assert await later.status() == "scheduled"
                await engine.advance(3600)
                assert await later.result(timeout=5) == {"sum": 7}

    run(scenario())


def test_a_client_and_a_worker_instance_and_terminal_errors(run):
    async def scenario():
        producer = Tay(mode="client", socket_path=NO_SOCKET)
        worker = Tay(mode="worker", socket_path=NO_SOCKET)

        @worker.task(name="app.fail.v1")
        def fail() -> None:
            raise ValueError("card declined")

        async with InMemoryEngine() as engine:
            engine.attach(producer, worker)
            async with producer, worker:
                unknown = await producer.enqueue("app.nobody.v1", {})
                failed = await producer.enqueue("app.fail.v1", {})
                with pytest.raises(RemoteTaskError):
                    await failed.result(timeout=5)
                assert await unknown.status() == "available"  # no worker: waits, no attempt used
                assert await unknown.cancel() == "cancelled"
                assert engine.state_counts() == {"discarded": 1, "cancelled": 1}

    run(scenario())


def test_a_schedule_fires_when_its_time_comes(run):
    async def scenario():
        tay, seen = app()
        async with InMemoryEngine() as engine:
            engine.attach(tay)
            async with tay:
                await tay.every("app.add.v1", minutes=5, kwargs={"left": 1, "right": 2}, delay=300)
                assert seen["add"] == []
                await engine.advance(301)
                for _ in range(200):
                    if seen["add"]:
                        break
                    await asyncio.sleep(0.005)
                assert seen["add"] == [(1, 2)]

    run(scenario())


def test_http_producers_and_workers_attach_through_the_servers_http_layer(run):
    async def scenario():
        producer = TayHTTP("http://127.0.0.1:9")  # a closed port: proves nothing connects
        worker = TayHTTPWorker("http://127.0.0.1:9", capacity=2)
        seen = []

        @worker.task(name="app.add.v1")
        def add(left: int, right: int) -> dict:
            seen.append((left, right))
            if len(seen) == 1:
                raise RuntimeError("first attempt fails")
            return {"sum": left + right}

        async with InMemoryEngine() as engine:
            engine.attach(producer, worker)
            serving = asyncio.create_task(worker.serve_forever())
            try:
                job = await producer.enqueue("app.add.v1", {"left": 2, "right": 5}, retries=1)
                while await job.status() != "retryable":
                    await asyncio.sleep(0.01)
                await engine.advance(2)  # the retry's backoff, on the engine's clock
                assert await job.result(timeout=5) == {"sum": 7}
                assert seen == [(2, 5), (2, 5)]
                with pytest.raises(ServerError) as refused:  # the HTTP layer's own checks
                    await producer.enqueue("app.add.v1", {"left": 1}, priority=5)
                assert refused.value.code == "invalid_enqueue"
                assert engine.state_counts() == {"completed": 1}
            finally:
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
            await producer.close()

    run(scenario())


def test_an_http_client_of_a_stopped_engine_is_refused():
    async def scenario():
        producer = TayHTTP("http://127.0.0.1:9", request_timeout=1)
        InMemoryEngine().attach(producer)
        with pytest.raises(ConnectionLost, match="not running"):
            await producer.enqueue("app.add.v1", {})

    asyncio.run(scenario())


def test_only_tay_clients_attach_and_not_before_start(run):
    with pytest.raises(TypeError, match="Tay, TayHTTP and TayHTTPWorker instances"):
        InMemoryEngine().attach(object())

    async def scenario():
        tay = Tay(socket_path=NO_SOCKET, connect_timeout=0.2)
        InMemoryEngine().attach(tay)
        with pytest.raises(Exception, match="not running"):
            await tay.start()
        await tay.close()

    run(scenario())
    with pytest.raises(ValueError):
        asyncio.run(InMemoryEngine().advance(-1))
