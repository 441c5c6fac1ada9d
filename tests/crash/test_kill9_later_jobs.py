"""kill -9 of a real ``tay serve`` whose journal tail holds delayed jobs (run, and still
waiting) and retried ones (a first attempt failed, the retry succeeded), then a restart on
the same data dir: every job reads back exactly as the first life served it.

The restart takes these jobs through the columnar tail walk (a done delayed job held in
columns, a waiting one as a ``ScheduledRow``, a retried success as a ``RetriedRow``;
tests/engine/test_tail_columns.py proves them equal to the record-by-record replay in
process). Here the whole path runs through real processes, sockets and segment files: the
jobs' public views before the kill and after the restart are compared one by one, and the
waiting jobs still come due in the second life.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.crash.cluster import ServerProcess, inspect_after_kill
from tests.crash.wire import WireClient, serve_executions

TASK = "later"
PLAIN, DELAYED, RETRIED, WAITING = 12, 8, 8, 4


async def enqueue_all(socket_path: str, waiting_ms: int) -> dict[str, str]:
    """The jobs of each kind, enqueued one by one: job id -> kind."""
    client = await WireClient.connect(socket_path)
    kinds: dict[str, str] = {}
    plan = ([("plain", {})] * PLAIN + [("delayed", {"delay_ms": 300})] * DELAYED
            + [("retried", {"retries": 1})] * RETRIED
            + [("waiting", {"delay_ms": waiting_ms})] * WAITING)
    try:
        for n, (kind, options) in enumerate(plan):
            reply = await client.request("enqueue", task=TASK, args={"n": n, "kind": kind},
                                         options=dict(options))
            assert reply["type"] == "enqueued", reply
            kinds[reply["job"]["id"]] = kind
    finally:
        await client.close()
    return kinds


async def run_worker(socket_path: str, finished: dict[str, int], stop: asyncio.Event) -> None:
    """Fail the first attempt of every "retried" job, succeed (nil result) otherwise;
    ``finished`` counts each job's acknowledged successes."""
    client = await WireClient.connect(socket_path, "worker", 4)
    await client.request("register_tasks", tasks=[TASK])
    failed_once: set[str] = set()

    async def execute(frame: dict) -> None:
        ids = {"reservation_id": frame["reservation_id"],
               "execution_id": frame["execution_id"], "job_id": frame["job_id"]}
        await client.request("started", **ids)
        if frame["args"]["kind"] == "retried" and frame["job_id"] not in failed_once:
            failed_once.add(frame["job_id"])
            reply = await client.request("failed", error={"type": "Flaky", "message": "once"},
                                         **ids)
        else:
            reply = await client.request("succeeded", result=None, **ids)
            finished[frame["job_id"]] = finished.get(frame["job_id"], 0) + 1
        assert reply["type"] == "accepted", reply

    try:
        await serve_executions(client, stop, execute)
    finally:
        await client.close()


async def views(socket_path: str, job_ids) -> dict[str, dict]:
    client = await WireClient.connect(socket_path)
    try:
        return {job_id: (await client.request("status", job_id=job_id))["job"]
                for job_id in job_ids}
    finally:
        await client.close()


async def until(predicate, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_delayed_and_retried_jobs_read_back_the_same_after_kill9(scratch) -> None:
    server = ServerProcess(scratch / "data", str(scratch / "tay.sock"), scratch / "server.log")

    async def first_life() -> tuple[dict[str, str], dict[str, dict]]:
        stop = asyncio.Event()
        finished: dict[str, int] = {}
        worker = asyncio.ensure_future(run_worker(server.socket_path, finished, stop))
        kinds = await enqueue_all(server.socket_path, waiting_ms=3_600_000)
        ran = [job_id for job_id, kind in kinds.items() if kind != "waiting"]
        await until(lambda: all(job_id in finished for job_id in ran), timeout=30)
        stop.set()
        await worker
        return kinds, await views(server.socket_path, kinds)

    server.start()
    try:
        kinds, before = asyncio.run(first_life())
        server.kill9()
        inspect_after_kill(server.data_dir)
        server.start()
        after = asyncio.run(views(server.socket_path, kinds))
    finally:
        server.stop()
    assert after == before
    by_kind = {kind: [before[job_id] for job_id, k in kinds.items() if k == kind]
               for kind in ("plain", "delayed", "retried", "waiting")}
    assert all(job["state"] == "completed" and job["attempt"] == 1
               for kind in ("plain", "delayed") for job in by_kind[kind])
    assert all(job["state"] == "completed" and job["attempt"] == 2
               for job in by_kind["retried"])
    assert all(job["state"] == "scheduled" and job["scheduled_at"] is not None
               for job in by_kind["waiting"])


def test_waiting_jobs_held_after_kill9_still_come_due(scratch) -> None:
    """Jobs delayed past the kill wait out their delay in the second life and run then."""
    server = ServerProcess(scratch / "data", str(scratch / "tay.sock"), scratch / "server.log")

    async def second_life(waiting: list[str]) -> dict[str, int]:
        stop = asyncio.Event()
        finished: dict[str, int] = {}
        worker = asyncio.ensure_future(run_worker(server.socket_path, finished, stop))
        await until(lambda: all(job_id in finished for job_id in waiting), timeout=30)
        stop.set()
        await worker
        return finished

    server.start()
    try:
        kinds = asyncio.run(enqueue_all(server.socket_path, waiting_ms=1_500))
        server.kill9()
        inspect_after_kill(server.data_dir)
        server.start()
        waiting = [job_id for job_id, kind in kinds.items() if kind == "waiting"]
        finished = asyncio.run(second_life(waiting))
        after = asyncio.run(views(server.socket_path, waiting))
    finally:
        server.stop()
    assert all(finished[job_id] == 1 for job_id in waiting)
    assert all(job["state"] == "completed" for job in after.values())
