"""Online compaction through a real ``tay serve`` (strict sync, Unix socket) and our SDK.

Producers enqueue and a worker completes jobs while the operator's ``compact`` request
runs; an interval schedule keeps firing. Every acknowledged job, result and the schedule
must be there after the switch and again after a restart, which opens the new epoch.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tay import Tay
from tay.admin.client import SocketAdmin
from tests.crash.cluster import SCRATCH, ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def server():
    SCRATCH.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="oc-e2e-", dir=SCRATCH))
    sockets = tempfile.mkdtemp(prefix="toc-", dir="/tmp")
    process = ServerProcess(root / "data", os.path.join(sockets, "tay.sock"),
                            root / "server.log", "--group-commit-max-events", "32",
                            "--group-commit-interval-ms", "2")
    try:
        yield process.start()
    finally:
        process.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def test_load_keeps_flowing_through_an_online_compaction_and_a_restart(server):
    admin = SocketAdmin(server.socket_path)
    before = admin.call("status", {})["storage"]

    async def scenario():
        tay = Tay(socket_path=server.socket_path, capacity=16)

        @tay.task(name="oc.echo")
        def echo(n: int = 0) -> dict:
            return {"n": n}

        async with tay:
            schedule = await tay.every("oc.echo", seconds=1, kwargs={"n": -1},
                                       declaration_id="oc-every-second")
            handles = {n: await tay.enqueue("oc.echo", {"n": n}) for n in range(150)}
            for handle in handles.values():
                await handle.result()
            stop = asyncio.Event()

            async def produce(start: int) -> None:
                n = start
                while not stop.is_set():
                    handles[n] = await tay.enqueue("oc.echo", {"n": n})
                    n += 1

            producers = [asyncio.ensure_future(produce(1000 * (p + 1))) for p in range(3)]
            await asyncio.sleep(0.05)
            report = await asyncio.get_running_loop().run_in_executor(
                None, admin.call, "compact", {})
            await asyncio.sleep(0.05)  # and a little load into the new epoch's tail
            stop.set()
            await asyncio.gather(*producers)
            # the last jobs enqueued may still be running: wait for them (a stall still fails)
            results = {n: await handle.result(timeout=30) for n, handle in handles.items()}
            assert results == {n: {"n": n} for n in handles}
            return report, sorted(handles), {n: h.id for n, h in handles.items()}, schedule.id

    report, numbers, ids, schedule_id = asyncio.run(scenario())
    assert report["source_epoch_id"] == before["epoch"] != report["epoch_id"]
    assert report["catch_up_records"] > 0, "no write landed while the candidate was prepared"
    assert len(numbers) > 150 and report["reclaimed"] is True
    status = admin.call("status", {})
    assert status["storage"]["epoch"] == report["epoch_id"]
    assert status["storage"]["last_compaction"]["epoch_id"] == report["epoch_id"]

    server.stop()
    server.start()
    admin = SocketAdmin(server.socket_path)
    assert admin.call("status", {})["storage"]["epoch"] == report["epoch_id"]

    async def after_restart():
        tay = Tay(socket_path=server.socket_path, mode="client")
        async with tay:
            found = {n: admin.call("job", {"job_id": ids[n]})["job"] for n in numbers}
            assert all(job["state"] == "completed" and job["result"] == {"n": n}
                       for n, job in found.items()), found
            assert (await tay.get_schedule(schedule_id))["cancelled_at"] is None

    asyncio.run(after_restart())
