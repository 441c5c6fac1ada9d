"""What a retained job holds: shared strings rather than per-job copies."""

from __future__ import annotations

import orjson

from tests.engine.conftest import Driver


def test_jobs_of_one_task_and_queue_share_their_key_strings() -> None:
    driver = Driver()
    ids = []
    for _ in range(2):  # each request decoded on its own, as the server does
        request = orjson.loads(b'{"task": "billing.capture.v1", "queue": "payments"}')
        ids.append(driver.job_id(task=request["task"], queue=request["queue"]))
    first, second = (driver.engine.jobs[bytes.fromhex(job_id)] for job_id in ids)
    assert first.task == "billing.capture.v1" and first.queue == "payments"
    assert first.task is second.task and first.queue is second.queue
    assert first.state.definition["worker_key"] is second.state.definition["worker_key"]
