"""The SDK against a real ``tay serve`` subprocess (skipped only while tay.server is missing)."""

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from tay import Tay
from tay.errors import ConnectionLost, RemoteTaskError, ServerError

from .server import REPO

pytestmark = pytest.mark.slow


async def wait_status(handle, wanted, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while (status := await handle.status()) not in wanted:
        assert asyncio.get_running_loop().time() < deadline, f"job stuck in {status!r}"
        await asyncio.sleep(0.02)
    return status


def test_embedded_round_trip_with_idempotent_submission(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path)

        @tay.task(name="demo.add.v1")
        def add(left: int, right: int) -> dict:
            return {"sum": left + right}

        async with tay:
            handle = await tay.enqueue("demo.add.v1", {"left": 2, "right": 5}, submission_id="python-interop-submission")
            assert handle.id == "5c7e3bd82fedaf28aaa0ce9a171bb577" and handle.durability == "persistent"
            assert await wait_status(handle, {"completed"}) == "completed"
            assert await handle.result() == {"sum": 7}
            again = await tay.enqueue("demo.add.v1", {"left": 2, "right": 5}, submission_id="python-interop-submission")
            assert again.id == handle.id
            with pytest.raises(ServerError):
                await tay.enqueue("demo.add.v1", {"left": 3, "right": 5}, submission_id="python-interop-submission")
            via_task = await add.enqueue(1, right=2, durability="volatile")
            await wait_status(via_task, {"completed"})
            assert via_task.durability == "volatile" and await via_task.result() == {"sum": 3}

    run(scenario(), timeout=30)


def test_failed_task_raises_remote_task_error_and_cancel_is_reported(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path)

        @tay.task(name="demo.fail")
        def fail():
            raise ValueError("card declined")

        async with tay:
            failed = await fail.enqueue()
            assert await wait_status(failed, {"discarded"}) == "discarded"
            with pytest.raises(RemoteTaskError):
                await failed.result()
            later = await tay.enqueue("nobody.runs.this", delay=60)
            assert await later.status() == "scheduled"
            assert await later.cancel() == "cancelled"
            with pytest.raises(ServerError):
                await later.result()

    run(scenario(), timeout=30)


def test_client_reconnects_after_engine_restart_and_replays_registrations(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path, reconnect_max_delay=0.2)

        @tay.task(name="demo.echo")
        def echo(value):
            return value

        async with tay:
            first = await echo.enqueue("before")
            await wait_status(first, {"completed"})
            await asyncio.to_thread(tay_server.stop)
            with pytest.raises(ConnectionLost):
                await first.status()
            await asyncio.to_thread(tay_server.start)
            await tay.start()
            assert await first.result() == "before"  # durable across the restart
            second = await echo.enqueue("after")
            await wait_status(second, {"completed"})
            assert await second.result() == "after"

    run(scenario(), timeout=40)


def test_tay_worker_command_runs_jobs_and_stops_on_sigterm(run, tay_server):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests' / 'sdk'}",
           "TAY_SOCKET_PATH": tay_server.socket_path}
    worker = subprocess.Popen([sys.executable, "-m", "tay.worker", "worker_app:tay", "--grace", "5"], env=env,
                              cwd=str(REPO / "tests" / "sdk"), stderr=subprocess.PIPE)

    async def scenario():
        async with Tay(mode="client", socket_path=tay_server.socket_path) as producer:
            job = await producer.enqueue("e2e.add", {"left": 20, "right": 22})
            await wait_status(job, {"completed"}, timeout=15)
            assert await job.result() == {"sum": 42}
            slow = await producer.enqueue("e2e.slow", {"seconds": 0.5})
            await wait_status(slow, {"executing"}, timeout=15)
            worker.send_signal(signal.SIGTERM)  # graceful: the running job may finish
            await wait_status(slow, {"completed"}, timeout=15)

    try:
        run(scenario(), timeout=40)
        assert worker.wait(15) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_schedules_round_trip(run, tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path)
        tay.task(name="demo.tick")(lambda: "tick")
        async with tay:
            schedule = await tay.every("demo.tick", seconds=0.05, declaration_id="e2e-tick")
            assert schedule.id == "e2e-tick"
            assert (await schedule.status())["id"] == "e2e-tick"
            assert "e2e-tick" in [item["id"] for item in await tay.schedules()]
            cancelled = await schedule.cancel()
            assert cancelled["cancelled_at"] is not None

    run(scenario(), timeout=30)
