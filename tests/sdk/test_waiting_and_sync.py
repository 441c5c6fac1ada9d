"""``result(timeout=)``, bound calls and ``SyncTay`` against a real ``tay serve``."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from tay import ResultTimeout, SyncTay, Tay, ValidationError
from tay.errors import RemoteTaskError, ServerError

pytestmark = pytest.mark.slow


def test_result_waits_for_the_job_and_times_out_on_its_own_error(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path)

        @tay.task(name="wait.slow.v1")
        async def slow(seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "done"

        async with tay:
            job = await slow.enqueue(0.3)
            with pytest.raises(ServerError) as not_ready:
                await job.result()  # no timeout: tay-client's immediate answer
            assert not_ready.value.code == "result_not_ready"
            started = asyncio.get_running_loop().time()
            assert await job.result(timeout=10) == "done"
            assert asyncio.get_running_loop().time() - started < 5
            stuck = await slow.enqueue(30)
            with pytest.raises(ResultTimeout) as expired:
                await stuck.result(timeout=0.2)
            assert expired.value.job_id == stuck.id and isinstance(expired.value, TimeoutError)
            assert await stuck.status() in ("available", "executing")  # nothing changed
            await stuck.cancel()
            with pytest.raises(ServerError) as cancelled:
                await stuck.result(timeout=5)  # terminal: raised at once, not waited out
            assert cancelled.value.code == "task_cancelled"
            with pytest.raises(ValidationError):
                await job.result(timeout=-1)

    run(scenario(), timeout=30)


def test_a_bound_call_carries_arguments_and_task_defaults(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path)

        @tay.task(name="wait.add.v1", retries=3)
        def add(left: int, right: int = 1) -> dict:
            return {"sum": left + right}

        call = add.bind(2)
        assert (call.task, call.args, call.options) == ("wait.add.v1", {"left": 2, "right": 1}, {"retries": 3})
        with pytest.raises(ValidationError, match="wait.add.v1"):
            add.bind(2, delay=5)  # job options are enqueue's keywords, not the call's
        async with tay:
            job = await tay.enqueue(call, submission_id="bound-1", retries=0)
            assert await job.result(timeout=10) == {"sum": 3}
            with pytest.raises(ValidationError, match="carries its arguments"):
                await tay.enqueue(call, {"left": 1})

    run(scenario(), timeout=30)


def test_sync_tay_serves_threads_of_a_wsgi_app(tay_server):
    worker_ready = threading.Event()
    stop = threading.Event()

    def worker() -> None:
        async def serve():
            tay = Tay(socket_path=tay_server.socket_path, capacity=4)

            @tay.task(name="sync.add.v1")
            def add(left: int, right: int) -> dict:
                return {"sum": left + right}

            @tay.task(name="sync.fail.v1")
            def fail() -> None:
                raise RuntimeError("declined")

            async with tay:
                worker_ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.02)

        asyncio.run(serve())

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert worker_ready.wait(10)
        with SyncTay(socket_path=tay_server.socket_path) as tay:
            results: list[object] = []

            def request(i: int) -> None:  # what each WSGI request thread does
                job = tay.enqueue("sync.add.v1", {"left": i, "right": 1}, submission_id=f"sync-{i}")
                results.append(job.result(timeout=10))

            requests = [threading.Thread(target=request, args=(i,)) for i in range(8)]
            for each in requests:
                each.start()
            for each in requests:
                each.join(20)
            assert sorted(r["sum"] for r in results) == list(range(1, 9))
            failed = tay.enqueue("sync.fail.v1")
            with pytest.raises(RemoteTaskError):
                failed.result(timeout=10)
            assert failed.status() == "discarded"
            pulse = tay.every("sync.add.v1", seconds=3600, kwargs={"left": 1, "right": 1}, delay=3600)
            assert pulse.status()["id"] == pulse.id and pulse.id in {s["id"] for s in tay.schedules()}
            assert "cancelled_at" in pulse.cancel()
        tay.close()  # closing twice is harmless
    finally:
        stop.set()
        thread.join(10)


def test_sync_tay_restarts_its_loop_in_a_forked_child(tay_server):
    with SyncTay(socket_path=tay_server.socket_path) as tay:
        tay.schedules()  # the parent's loop thread now runs
        pid = os.fork()
        if pid == 0:  # the child: the parent's thread did not survive the fork
            code = 0
            try:
                tay.schedule_page(limit=1)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert isinstance(tay.schedules(), list)  # and the parent's still works


def test_sync_tay_refuses_both_transports():
    with pytest.raises(ValidationError, match="not both"):
        SyncTay(socket_path="/run/tay/tay.sock", base_url="http://127.0.0.1:8080")
