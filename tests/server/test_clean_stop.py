"""SIGTERM with open connections is a clean stop: exit 0 and no ERROR in the log, on both
transports, even with an execution in flight that outlives the drain timeout (its
interruption is recorded, not lost)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.conformance.harness import Server

from .raw import RawClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_with_open_connections_and_work_in_flight_logs_no_error() -> None:
    port = free_port()
    # the drain gives the in-flight execution 1 s to report; it never does
    server = Server("--http-port", str(port), "--drain-timeout", "1", durability="sync").start()
    clients: list[RawClient] = []
    http = None
    try:
        worker = RawClient(server.socket)
        clients.append(worker)
        worker.hello("worker", 2, runtime_id="busy")
        worker.request("register_tasks", tasks=["slow.task"])
        producer = RawClient(server.socket)
        clients.append(producer)
        producer.hello()
        job = producer.request("enqueue", task="slow.task", args={}, options={})
        worker.next_pushed("execute")  # in flight when the signal arrives
        idle = RawClient(server.socket)  # connected, never says hello
        clients.append(idle)
        http = socket.create_connection(("127.0.0.1", port), timeout=5)
        http.sendall(b"GET /jobs/" + job["job_id"].encode() + b" HTTP/1.1\r\nhost: t\r\n\r\n")
        assert http.recv(65536).startswith(b"HTTP/1.1 200")  # a keep-alive connection stays
        assert server.process is not None
        server.process.terminate()
        assert server.process.wait(timeout=15) == 0
        server.process = None
        log = server.log()
        assert " ERROR " not in log, log
        assert "tay stopped cleanly" in log
        restarted = Server(durability="sync")
        restarted.root, restarted.data_dir = server.root, server.data_dir
        restarted.socket = server.socket
        restarted.start()
        try:
            status = RawClient(restarted.socket)
            status.hello()
            job_state = status.request("status", job_id=job["job_id"])
            # the execution was interrupted (recorded before the journal closed) and waits to
            # run again at the same attempt
            assert job_state["status"] in ("retryable", "available"), job_state
            assert job_state["job"]["attempt"] == 1
            status.close()
        finally:
            restarted.stop()
    finally:
        for client in clients:
            client.close()
        if http is not None:
            http.close()
        server.close()


def test_sigterm_on_an_idle_server_exits_zero() -> None:
    server = Server().start()
    try:
        assert server.process is not None
        server.process.terminate()
        assert server.process.wait(timeout=15) == 0
        server.process = None
        assert " ERROR " not in server.log()
    finally:
        server.close()


def test_a_clean_stop_with_compact_on_stop_leaves_a_compacted_epoch() -> None:
    from tay.storage.v2.layout import history_dir

    server = Server("--compact-on-stop", "on", durability="sync").start()
    restarted = None
    try:
        producer = RawClient(server.socket)
        producer.hello()
        jobs = [producer.request("enqueue", task="t.v1", args={"n": n, "pad": "x" * 200},
                                 options={})["job_id"] for n in range(30)]
        producer.close()
        tail_dir = history_dir(str(server.data_dir))
        assert server.process is not None
        server.process.terminate()
        assert server.process.wait(timeout=30) == 0
        server.process = None
        log = server.log()
        assert " ERROR " not in log and "tay stopped cleanly" in log
        assert "compacted the store online" in log
        # CURRENT names a new epoch: its base holds the jobs, its tail nothing yet
        segments = history_dir(str(server.data_dir))
        assert segments != tail_dir
        sizes = sorted(os.path.getsize(os.path.join(segments, name))
                       for name in os.listdir(segments))
        assert sizes[0] == 44 and sizes[-1] > 30 * 200  # the tail's header; the base
        restarted = Server(durability="sync")
        restarted.root, restarted.data_dir = server.root, server.data_dir
        restarted.socket = server.socket
        restarted.start()
        status = RawClient(restarted.socket)
        status.hello()
        for job_id in jobs:
            assert status.request("status", job_id=job_id)["status"] == "available"
        status.close()
    finally:
        if restarted is not None:
            restarted.stop()
        server.close()
