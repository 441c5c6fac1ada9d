"""A real ``tay serve`` packs the jobs it finished (tay.engine.retained.packed), and they read the
same through both the producer API and the admin API, before and after a restart."""

from __future__ import annotations

import asyncio
import time

import pytest

from tay.admin.client import SocketAdmin
from tay.sdk.handles import JobHandle
from tests.server.test_operations_e2e import dirs, free_port, get, run_worker, samples  # noqa: F401
from tests.sdk.server import Server

pytestmark = pytest.mark.slow


def held_compact(base: str) -> float:
    return samples(get(f"{base}/metrics")[1].decode())[("tay_jobs_held_compact", ())]


def test_finished_jobs_are_packed_and_read_the_same(dirs):  # noqa: F811
    data_dir, socket_path = dirs
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = Server(data_dir, socket_path, "--metrics-port", str(port))
    server.start()
    try:
        async def finish(tay):
            done = [await tay.enqueue("ops.ok", {"n": n}) for n in range(5)]
            failed = await tay.enqueue("ops.boom", {})
            while await failed.status() != "discarded":
                await asyncio.sleep(0.02)
            for handle in done:
                assert await handle.result(timeout=10) == "ok"
            return [handle.id for handle in done], failed.id

        done, failed = run_worker(socket_path, finish)
        admin = SocketAdmin(socket_path)
        before = {job_id: admin.call("job", {"job_id": job_id})["job"]
                  for job_id in (*done, failed)}
        listed = admin.call("jobs", {"limit": 50})
        deadline = time.monotonic() + 15  # packed within two packer rounds (a second each)
        while held_compact(base) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert held_compact(base) == 6
        assert admin.call("jobs", {"limit": 50}) == listed  # read in place, none taken out
        assert held_compact(base) == 6
        after = {job_id: admin.call("job", {"job_id": job_id})["job"]
                 for job_id in (*done, failed)}
        assert after == before  # taken out to be read: the same fields, timeline, errors
        assert after[failed]["state"] == "discarded" and after[done[0]]["attempts"][0][
            "outcome"] == "completed"

        async def results(tay):
            return [await JobHandle(job_id, tay).result(timeout=5) for job_id in done]

        assert run_worker(socket_path, results) == ["ok"] * 5
        samples_now = samples(get(f"{base}/metrics")[1].decode())
        assert samples_now[("tay_gc_full_collection_seconds_count", ())] >= 0
    finally:
        server.stop()
    restarted = Server(data_dir, socket_path)
    restarted.start()
    try:
        admin = SocketAdmin(socket_path)
        for job_id, job in before.items():
            again = admin.call("job", {"job_id": job_id})["job"]
            assert {**again, "attempts": None} == {**job, "attempts": None}
    finally:
        restarted.stop()
