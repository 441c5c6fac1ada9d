"""Metrics, health, logs and the graceful drain of a real ``tay serve`` process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tay import Tay
from tay.admin.client import SocketAdmin
from tests.sdk.server import REPO, Server, scratch_dirs

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def dirs():
    data, sockets = scratch_dirs()
    with data, sockets:
        yield os.path.join(data.name, "data"), os.path.join(sockets.name, "tay.sock")


def get(url: str) -> tuple[int, bytes]:
    deadline = time.monotonic() + 10
    while True:  # the metrics listener starts right after the socket
        try:
            return _get(url)
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def run_worker(socket_path: str, body, capacity: int = 2, timeout: float = 60):
    async def scenario():
        tay = Tay(socket_path=socket_path, capacity=capacity)

        @tay.task(name="ops.ok")
        def ok() -> str:
            return "ok"

        @tay.task(name="ops.boom")
        def boom() -> None:
            raise KeyError("missing")

        @tay.task(name="ops.sleep")
        async def sleep(seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "slept"

        async with tay:
            return await body(tay)
    return asyncio.run(asyncio.wait_for(scenario(), timeout))


def test_metrics_health_and_logs_on_a_socket_only_engine(dirs):
    data_dir, socket_path = dirs
    port = free_port()
    server = Server(data_dir, socket_path, "--metrics-port", str(port), "--log-format", "json")
    server.start()
    try:
        base = f"http://127.0.0.1:{port}"
        assert get(f"{base}/healthz") == (200, b'{"status":"alive"}')
        status, body = get(f"{base}/readyz")
        assert status == 200 and json.loads(body)["status"] == "ready"
        before = samples(get(f"{base}/metrics")[1].decode())
        assert before[("tay_writer_running", ())] == 1

        async def body_(tay):
            for name in ("m-active", "m-paused", "m-cancelled"):  # none due in the test
                await tay.every("ops.ok", hours=1, delay=3_600, declaration_id=name)
            for _ in range(3):
                await tay.enqueue("ops.ok", {})
            failed = await tay.enqueue("ops.boom", {})
            await tay.enqueue("nobody.v1", {}, queue="orphans")
            while await failed.status() != "discarded":
                await asyncio.sleep(0.02)
            return failed.id

        admin = SocketAdmin(socket_path)
        admin.call("scale_queue", {"queue": "orphans", "concurrency": 2})
        failed_id = run_worker(socket_path, body_)
        admin.call("pause_schedule", {"schedule_id": "m-paused"})
        admin.call("pause_schedule", {"schedule_id": "m-cancelled"})
        admin.call("cancel_schedule", {"schedule_id": "m-cancelled"})
        admin.close()
        deadline = time.monotonic() + 10
        while True:
            after = samples(get(f"{base}/metrics")[1].decode())
            done = after.get(("tay_jobs_total", (("outcome", "completed"), ("queue", "default"),
                                                 ("task", "ops.ok"))), 0)
            if done == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert done == 3
        assert after[("tay_jobs_total", (("outcome", "enqueued"), ("queue", "default"),
                                         ("task", "ops.ok")))] == 3
        assert after[("tay_jobs_total", (("outcome", "discarded"), ("queue", "default"),
                                         ("task", "ops.boom")))] == 1
        assert after[("tay_queue_jobs", (("queue", "orphans"), ("state", "available")))] == 1
        # nobody runs its task: its queue's latency grows; the default queue has none ready
        assert after[("tay_queue_latency_seconds", (("queue", "orphans"),))] > 0
        assert after[("tay_queue_latency_seconds", (("queue", "default"),))] == 0
        # credits: the configured (default 10) and those set at runtime
        assert after[("tay_queue_credits", (("queue", "default"),))] == 10
        assert after[("tay_queue_credits", (("queue", "orphans"),))] == 2
        # running nothing: 0 for each queue that holds jobs (none is left running)
        assert after[("tay_queue_executing", (("queue", "default"),))] == 0
        assert after[("tay_queue_executing", (("queue", "orphans"),))] == 0
        # each execution's run time, by queue and task: the three successes and the failure
        ok = (("queue", "default"), ("task", "ops.ok"))
        assert after[("tay_job_run_seconds_count", ok)] == 3
        assert after[("tay_job_run_seconds_bucket", (("le", "+Inf"),) + ok)] == 3
        assert 0 <= after[("tay_job_run_seconds_sum", ok)] < 10
        assert after[("tay_job_run_seconds_count", (("queue", "default"),
                                                    ("task", "ops.boom")))] == 1
        assert [after[("tay_schedules", (("state", state),))]
                for state in ("active", "paused", "cancelled")] == [1, 1, 1]
        assert after[("tay_enqueue_ack_seconds_count", ())] >= 5
        assert after[("tay_commit_batch_events_count", ())] > before.get(
            ("tay_commit_batch_events_count", ()), 0)
        assert after[("tay_fsync_seconds_count", ())] >= 1
        # the loop's beat (every 0.1 s) goes on; a stall counter and its longest
        deadline = time.monotonic() + 10
        while after[("tay_event_loop_lag_seconds_count", ())] <= before[
                ("tay_event_loop_lag_seconds_count", ())] and time.monotonic() < deadline:
            time.sleep(0.05)
            after = samples(get(f"{base}/metrics")[1].decode())
        assert after[("tay_event_loop_lag_seconds_count", ())] > before[
            ("tay_event_loop_lag_seconds_count", ())]
        assert after[("tay_event_loop_stalls_total", ())] >= 0
        assert after[("tay_event_loop_longest_stall_seconds", ())] >= 0
        # per-event (the default): every batch is one submission, none gathers
        assert after[("tay_commit_gathered_batches_total", ())] == 0
        assert after[("tay_commit_batches_total", ())] >= 5
        assert after[("tay_disk_free_bytes", ())] > 0 and after[("tay_state_bytes", ())] > 0
        assert get(f"{base}/jobs")[0] == 404  # the metrics port serves nothing else
        check_process_figures(server, socket_path, base, after)
        deadline = time.monotonic() + 15
        while "no connected executor" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    failures = [line for line in lines if line.get("job_id") == failed_id]
    assert failures and failures[0]["level"] == "INFO" and failures[0]["error_type"] == "KeyError"
    assert failures[0]["outcome"] == "discarded" and "missing" not in failures[0]["message"]
    assert not any(line.get("outcome") == "completed" for line in lines)  # no per-job success
    unserved = [line for line in lines if line["level"] == "WARNING"
                and line.get("task") == "nobody.v1"]
    assert unserved and unserved[0]["queue"] == "orphans"


def check_process_figures(server: Server, socket_path: str, base: str, scraped: dict) -> None:
    """``status.process`` and the ``process_*`` metrics describe the server process; an
    online compaction's process is reported and its CPU counted once it is reaped."""
    from tay.admin.render import render_status

    admin = SocketAdmin(socket_path)
    status = admin.call("status", {})
    process = status["process"]
    assert process["pid"] == server.process.pid
    assert process["peak_rss_bytes"] >= process["rss_bytes"] > 10 * 2**20
    assert process["vms_bytes"] > process["rss_bytes"]
    assert process["threads"] >= 2  # the loop and the journal writer at least
    assert 3 < process["open_fds"] < (process["max_fds"] or 1 << 30)
    assert process["cpu_user_s"] > 0
    assert f"pid {server.process.pid}, " in render_status(status)
    assert status["storage"]["compaction"]["process"] is None
    assert scraped[("process_resident_memory_bytes", ())] > 10 * 2**20
    assert scraped[("process_cpu_seconds_total", ())] > 0
    assert scraped[("process_open_fds", ())] > 3
    assert scraped[("tay_process_threads", ())] >= 2
    assert scraped[("tay_process_peak_resident_memory_bytes", ())] >= scraped[
        ("process_resident_memory_bytes", ())] * 0.5
    assert scraped[("tay_compaction_process_running", ())] == 0
    assert scraped[("tay_compaction_cpu_seconds_total", ())] == 0
    report = admin.call("compact", {})
    used = report["process"]
    assert used["pid"] not in (None, server.process.pid) and used["peak_rss_bytes"] > 0
    total = sum(u["cpu_user_s"] + u["cpu_system_s"] for u in (used, used["check"]))
    counted = samples(get(f"{base}/metrics")[1].decode())[
        ("tay_compaction_cpu_seconds_total", ())]
    assert total > 0 and abs(counted - total) < 0.005


def test_a_history_cap_holds_starts_back_with_a_warning_and_a_metric(dirs):
    """--max-history-bytes 4000 leaves no room for a start's finishing reserve (a 65,536-byte
    result): the job stays available, a WARNING names the cap, and a counter counts it."""
    data_dir, socket_path = dirs
    port = free_port()
    server = Server(data_dir, socket_path, "--max-history-bytes", "4000",
                    "--metrics-port", str(port), "--log-format", "json").start()

    async def body(tay):
        job = await tay.enqueue("ops.ok", {})
        deadline = time.monotonic() + 20  # the server looks every 5 s
        while "history cap reached" not in server.log() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return job.id, await job.status()

    try:
        job_id, status = run_worker(socket_path, body)
        metrics = samples(get(f"http://127.0.0.1:{port}/metrics")[1].decode())
    finally:
        server.stop()
    assert status == "available"
    assert metrics[("tay_job_starts_refused_total", (("cap", "max_history_bytes"),))] >= 1
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    capped = [line for line in lines if "history cap reached" in line["message"]]
    assert capped and capped[0]["level"] == "WARNING", server.log()
    assert "--max-history-bytes 4000" in capped[0]["message"]


def test_drain_lets_a_running_job_finish_before_exit(dirs):
    data_dir, socket_path = dirs
    server = Server(data_dir, socket_path, "--drain-timeout", "20").start()
    exit_codes: list[int] = []

    async def body(tay):
        job = await tay.enqueue("ops.sleep", {"seconds": 1.0})
        while await job.status() != "executing":
            await asyncio.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        stopped = threading.Thread(target=lambda: exit_codes.append(server.process.wait(30)))
        stopped.start()
        await asyncio.sleep(0.3)
        assert not exit_codes  # still draining while the job runs
        while not exit_codes:
            await asyncio.sleep(0.05)
        return job.id

    try:
        job_id = run_worker(socket_path, body)
    finally:
        server.stop()
    assert exit_codes == [0]
    assert "drained: no execution is running" in server.log()
    server.start()
    try:
        job = SocketAdmin(socket_path).call("job", {"job_id": job_id})["job"]
        assert job["state"] == "completed" and job["result"] == "slept"
    finally:
        server.stop()


def test_a_second_sigterm_stops_at_once(dirs):
    data_dir, socket_path = dirs
    server = Server(data_dir, socket_path, "--drain-timeout", "60").start()

    async def body(tay):
        job = await tay.enqueue("ops.sleep", {"seconds": 30})
        while await job.status() != "executing":
            await asyncio.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert server.process.poll() is None
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = await asyncio.get_running_loop().run_in_executor(None, server.process.wait, 15)
        assert code == 0 and time.monotonic() - started < 10
        return job.id

    try:
        job_id = run_worker(socket_path, body)
    finally:
        server.stop()
    server.start()
    try:
        job = SocketAdmin(socket_path).call("job", {"job_id": job_id})["job"]
        assert job["state"] in ("retryable", "available") and job["attempt"] == 1
        assert job["diagnostic"] == {"code": 7, "version": 1}  # interrupted: same attempt
    finally:
        server.stop()


def test_every_serve_option_documents_its_default_and_variable():
    import argparse

    from tay.cli import build_parser

    groups = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    serve = groups.choices["serve"]
    options = [a for a in serve._actions if a.option_strings and a.dest != "help"]
    assert len(options) > 20
    for action in options:
        text = action.help or ""
        assert "TAY_" in text, action.option_strings
        assert any(word in text for word in ("default", "required", "all three")), \
            action.option_strings


def test_serve_refuses_bad_log_format_and_drain_timeout(dirs):
    data_dir, _ = dirs
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for extra, wanted in ((["--log-format", "xml"], "invalid choice"),
                          (["--drain-timeout", "-1"], "--drain-timeout")):
        done = subprocess.run([sys.executable, "-m", "tay.cli", "serve", "--data-dir", data_dir,
                               *extra], capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 2 and wanted in done.stderr
    done = subprocess.run([sys.executable, "-m", "tay.cli", "serve", "--data-dir", data_dir],
                          capture_output=True, text=True, timeout=30,
                          env={**env, "TAY_LOG_FORMAT": "xml"})
    assert done.returncode == 2 and "TAY_LOG_FORMAT" in done.stderr
