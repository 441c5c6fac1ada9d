"""A real ``tay serve`` (Unix socket + HTTP) whose journal fails while it runs.

The fault is real and injected from outside: a second hard link to the store's owner
lock makes the journal's post-write path check fail, so the very next batch stops the
writer for good. Both transports must then refuse writes (``unknown_outcome`` for the
request caught in the failing batch, ``unavailable`` for everything later), log it, and
exit 1 on SIGTERM; nothing keeps being served from memory.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import threading
import time

import orjson
import pytest

from tay.storage.layout import LOCK_NAME
from tests.conformance.harness import Server
from tests.server.test_listener import HELLO, frame, read_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

WORKER_HELLO = (b'{"version":1,"type":"hello","request_id":"h","mode":"worker",'
                b'"runtime_id":"w","max_concurrency":1}')


def http_port(server: Server) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = re.search(r"tay listening on http://127\.0\.0\.1:(\d+)", server.log())
        if found:
            return int(found.group(1))
        time.sleep(0.02)
    raise AssertionError("no HTTP listening line:\n" + server.log())


def call(port: int, method: str, path: str, body: object = None,
         token: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, orjson.dumps(body) if body is not None else None, headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, (orjson.loads(data) if data else {})
    finally:
        conn.close()


def socket_client(server: Server) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(server.socket)
    sock.sendall(frame(HELLO))
    assert read_frame(sock)["type"] == "hello_ok"
    return sock


def socket_enqueue(sock: socket.socket, request_id: str) -> dict:
    sock.sendall(frame(b'{"version":1,"type":"enqueue","request_id":"%s","task":"t.v1",'
                       b'"args":{}}' % request_id.encode()))
    return read_frame(sock)


def error_code(reply: dict) -> str:
    return reply["error"]["code"]


@pytest.fixture
def server():
    server = Server("--http-port", "0").start()
    yield server
    server.close()


def test_a_journal_failure_stops_writes_on_both_transports(server: Server) -> None:
    port = http_port(server)
    producer = socket_client(server)
    try:
        assert socket_enqueue(producer, "before")["type"] == "enqueued"
        status, created = call(port, "POST", "/jobs", {"task": "t.v1"})
        assert status == 201
        job_id = created["job_id"]
        status, registered = call(port, "POST", "/workers",
                                  {"runtime_id": "hw", "tasks": ["x.v1"], "capacity": 1})
        assert status == 201
        token = registered["worker_token"]
        waiting_claim: list[tuple[int, dict]] = []
        claimer = threading.Thread(target=lambda: waiting_claim.append(
            call(port, "POST", "/queues/default/claim", token=token)))
        # A claim parked on the empty queue when the writer stops is woken at once (pinned
        # without timing by tests/http/test_http_workers.py); one that arrives after the
        # stop is refused at once. Either way it answers 503 well before its 20 s poll.
        claimer.start()

        os.link(server.data_dir / LOCK_NAME, server.root / "second-name.lock")

        # the request whose batch hit the failure: its outcome is unknown
        status, failed = call(port, "POST", "/jobs", {"task": "t.v1"})
        assert (status, failed["error"]["code"]) == (503, "unknown_outcome")
        claimer.join(timeout=5)  # woken by the stop, not by its 20 s long-poll timeout
        assert waiting_claim and waiting_claim[0][0] == 503, waiting_claim
        assert waiting_claim[0][1]["error"]["code"] == "unavailable"
        # every later request on either transport: unavailable, reads included
        for method, path, body in [("POST", "/jobs", {"task": "t.v1"}),
                                   ("GET", f"/jobs/{job_id}", None),
                                   ("DELETE", f"/jobs/{job_id}", None),
                                   ("POST", "/schedules",
                                    {"schedule_id": "s", "task": "t.v1", "every_ms": 60000}),
                                   ("POST", "/workers",
                                    {"runtime_id": "late", "tasks": ["x.v1"], "capacity": 1})]:
            status, refused = call(port, method, path, body)
            assert (status, refused["error"]["code"]) == (503, "unavailable"), (method, path)
        status, refused = call(port, "POST", "/queues/default/claim", token=token)
        assert (status, refused["error"]["code"]) == (503, "unavailable")
        assert error_code(socket_enqueue(producer, "after")) == "unavailable"
        producer.sendall(frame(b'{"version":1,"type":"status","request_id":"s",'
                               b'"job_id":"%s"}' % job_id.encode()))
        assert error_code(read_frame(producer)) == "unavailable"
        worker = socket.socket(socket.AF_UNIX)
        worker.settimeout(10)
        worker.connect(server.socket)
        worker.sendall(frame(WORKER_HELLO))
        assert error_code(read_frame(worker)) == "unavailable"
        worker.close()
    finally:
        producer.close()
    assert "journal writer stopped" in server.log()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=10) == 1
