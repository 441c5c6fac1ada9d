"""``TayHTTPWorker`` against a real ``tay serve`` over HTTP: synchronous tasks in the worker's
threads, task failures and oversized results reported as failures, and ``cancel_execution``
(an async task is cancelled, a synchronous one runs to its end and its late report is
accepted). The worker runs in this process, so every path is measured by coverage."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from tay import TayHTTP, TayHTTPWorker
from tay.errors import RemoteTaskError

from .server import Server, http_url, scratch_dirs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_url():
    data, sockets = scratch_dirs()
    with data, sockets:
        server = Server(os.path.join(data.name, "data"), os.path.join(sockets.name, "tay.sock"),
                        "--http-port", "0").start()
        try:
            yield http_url(server)
        finally:
            server.stop()


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 15) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.01)
    assert await condition(), what


def with_worker(base_url: str, setup: Callable[[TayHTTPWorker], None],
                scenario: Callable[[TayHTTP, TayHTTPWorker], Awaitable[Any]]) -> Any:
    """Run ``scenario`` with a producer and a serving worker on one queue of their own."""
    async def main() -> Any:
        queue = f"q{os.urandom(4).hex()}"
        worker = TayHTTPWorker(base_url, queue=queue, capacity=2)
        setup(worker)
        serving = asyncio.ensure_future(worker.serve_forever())
        try:
            async with TayHTTP(base_url) as producer:
                producer.queue = queue
                return await scenario(producer, worker)
        finally:
            serving.cancel()
            await asyncio.wait([serving])
            assert serving.cancelled() or serving.exception() is None, serving.exception()
    return asyncio.run(asyncio.wait_for(main(), 60))


async def admin_job(producer: TayHTTP, job_id: str) -> dict[str, Any]:
    return (await producer._request("GET", f"/admin/jobs/{job_id}"))["job"]


async def state_of(producer: TayHTTP, job_id: str) -> str:
    return (await producer._request("GET", f"/jobs/{job_id}"))["status"]


def test_a_sync_task_runs_in_a_worker_thread_and_its_result_is_stored(base_url):
    ran_in: list[str] = []

    def setup(worker: TayHTTPWorker) -> None:
        @worker.task(name="e2e.sync.add")
        def add(left: int, right: int) -> dict:
            ran_in.append(threading.current_thread().name)
            return {"sum": left + right}

    async def scenario(producer: TayHTTP, worker: TayHTTPWorker) -> Any:
        job = await producer.enqueue("e2e.sync.add", {"left": 2, "right": 40},
                                     options={"queue": producer.queue})
        await until(lambda: _is(producer, job.id, "completed"), "the sync job completed")
        return await job.result()

    assert with_worker(base_url, setup, scenario) == {"sum": 42}
    assert ran_in and ran_in[0].startswith("tay-http-task")


async def _is(producer: TayHTTP, job_id: str, state: str) -> bool:
    return await state_of(producer, job_id) == state


def test_a_raising_task_and_an_oversized_result_are_reported_as_failures(base_url):
    def setup(worker: TayHTTPWorker) -> None:
        @worker.task(name="e2e.fail")
        async def fail() -> None:
            raise ValueError("no such account")

        @worker.task(name="e2e.huge")
        async def huge() -> str:
            return "x" * 70_000  # over the 65,536-byte result limit

    async def scenario(producer: TayHTTP, worker: TayHTTPWorker) -> Any:
        options = {"queue": producer.queue, "retries": 0}
        failing = await producer.enqueue("e2e.fail", {}, options=options)
        oversized = await producer.enqueue("e2e.huge", {}, options=options)
        for job in (failing, oversized):
            await until(lambda: _is(producer, job.id, "discarded"), f"{job.id} discarded")
        with pytest.raises(RemoteTaskError):
            await failing.result()
        return [(await admin_job(producer, job.id))["failure"] for job in (failing, oversized)]

    failure, too_large = with_worker(base_url, setup, scenario)
    assert (failure["type"], failure["message"]) == ("ValueError", "no such account")
    assert too_large["type"] == "ValidationError" and "65536 bytes" in too_large["message"]


def test_cancel_execution_cancels_an_async_task_but_lets_a_sync_one_finish(base_url):
    seen: dict[str, Any] = {"async": None, "sync_done": threading.Event(),
                            "release": threading.Event()}
    started = {"async": threading.Event(), "sync": threading.Event()}

    def setup(worker: TayHTTPWorker) -> None:
        @worker.task(name="e2e.wait.async")
        async def wait_async() -> str:
            started["async"].set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                seen["async"] = "cancelled"
                raise
            return "finished"

        @worker.task(name="e2e.wait.sync")
        def wait_sync() -> str:
            started["sync"].set()
            seen["release"].wait(30)  # a thread cannot be interrupted: it runs to its end
            seen["sync_done"].set()
            return "finished"

    async def scenario(producer: TayHTTP, worker: TayHTTPWorker) -> Any:
        options = {"queue": producer.queue}
        async_job = await producer.enqueue("e2e.wait.async", {}, options=options)
        sync_job = await producer.enqueue("e2e.wait.sync", {}, options=options)
        for name in ("async", "sync"):
            await asyncio.to_thread(started[name].wait, 15)
        for job in (async_job, sync_job):
            assert await job.cancel() == "cancelled"
        await until(lambda: _true(seen["async"] == "cancelled"), "the async task was cancelled")
        await until(lambda: _true(not worker._executions.keys() - _sync_ids(worker)),
                    "only the sync execution is left")
        seen["release"].set()
        await asyncio.to_thread(seen["sync_done"].wait, 15)
        await until(lambda: _true(not worker._executions), "the sync execution reported")
        return [await state_of(producer, job.id) for job in (async_job, sync_job)]

    assert with_worker(base_url, setup, scenario) == ["cancelled", "cancelled"]
    assert seen["async"] == "cancelled" and seen["sync_done"].is_set()


async def _true(value: bool) -> bool:
    return value


def _sync_ids(worker: TayHTTPWorker) -> set[str]:
    return {execution for execution, is_sync in worker._execution_is_sync.items() if is_sync}


def test_the_worker_rejects_events_it_does_not_understand(base_url):
    from tay.errors import ProtocolError

    worker = TayHTTPWorker(base_url)
    for message in ({"type": "execute", "execution_id": 1, "reservation_id": "r"},
                    {"type": "cancel_execution"}, {"type": "surprise"}):
        with pytest.raises(ProtocolError):
            worker._handle(orjson.loads(orjson.dumps(message)))


def test_session_rules_and_the_deprecated_entry_points(base_url):
    from tay.errors import ConnectionLost, ValidationError

    async def main() -> None:
        empty = TayHTTPWorker(base_url)
        with pytest.raises(ValidationError, match="register at least one task"):
            await empty.register()
        with pytest.raises(ConnectionLost, match="no session"):
            await empty._worker_request("POST", "/queues/default/claim")
        await empty.close()

        worker = TayHTTPWorker(base_url, queue=f"q{os.urandom(4).hex()}")
        worker.task(name="e2e.noop")(lambda: None)
        assert list(worker.tasks) == ["e2e.noop"]
        with pytest.warns(DeprecationWarning, match="only registers"):
            await worker.start()
        token = worker._token
        await worker.register()  # registering twice keeps the one session
        assert worker._token == token and len(token) == 43
        await worker.close()
        with pytest.warns(DeprecationWarning, match="serve_forever"):
            running = asyncio.ensure_future(worker.run())
            await until(lambda: _true(worker._token is not None), "run() registered")
        running.cancel()
        await asyncio.wait([running])
        assert running.cancelled()
        assert worker._token is None  # serve_forever always closes its session

    asyncio.run(asyncio.wait_for(main(), 30))
