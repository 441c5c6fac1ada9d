"""The per-request timer on a real server: a request whose answer waits for a slow group
commit gets ``request_timeout``, its slot is freed, and the late real answer is dropped."""

from __future__ import annotations

import socket
import time

import pytest

from tests.conformance.harness import Server

from .test_listener import HELLO, frame, read_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

ENQUEUE = (b'{"version":1,"type":"enqueue","request_id":"%s","task":"t.v1","args":{},'
           b'"options":{"submission_id":"%s"}}')


@pytest.fixture(scope="module")
def slow_commit_server():
    # Every write lingers ~1 s for its group to fill; the request timer is 150 ms.
    server = Server("--group-commit-max-events", "100000", "--group-commit-interval-ms", "1000",
                    "--group-commit-linger", "--request-timeout-ms", "150").start()
    yield server
    server.close()


def hello(server: Server) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(server.socket)
    sock.sendall(frame(HELLO))
    assert read_frame(sock)["type"] == "hello_ok"
    return sock


def test_timed_out_request_gets_request_timeout_and_no_late_answer(slow_commit_server) -> None:
    sock = hello(slow_commit_server)
    try:
        started = time.monotonic()
        sock.sendall(frame(ENQUEUE % (b"slow-1", b"sub-1")))
        reply = read_frame(sock)
        assert reply["request_id"] == "slow-1" and reply["error"]["code"] == "request_timeout"
        assert time.monotonic() - started < 0.9  # the timer, not the commit, answered
        time.sleep(1.2)  # the commit lands now; its `enqueued` must not reach us
        sock.sendall(frame(b'{"version":1,"type":"heartbeat","request_id":"after"}'))
        assert read_frame(sock) == {"version": 1, "type": "heartbeat_ok", "request_id": "after"}
        # The outcome was unknown, not lost: the job exists once the write is durable, so
        # repeating the same submission is an idempotent read answered without a new write.
        sock.sendall(frame(ENQUEUE % (b"again", b"sub-1")))
        reply = read_frame(sock)
        assert reply["type"] == "enqueued" and reply["request_id"] == "again"
    finally:
        sock.close()


def test_timed_out_requests_free_their_pending_slots(slow_commit_server) -> None:
    sock = hello(slow_commit_server)
    try:
        batch = b"".join(frame(ENQUEUE % (b"p%d" % i, b"slot-%d" % i)) for i in range(64))
        sock.sendall(batch)
        codes = [read_frame(sock)["error"]["code"] for _ in range(64)]
        assert codes == ["request_timeout"] * 64
        # All 64 slots are free again although no real answer has arrived yet.
        sock.sendall(b"".join(frame(ENQUEUE % (b"q%d" % i, b"more-%d" % i)) for i in range(64)))
        codes = [read_frame(sock)["error"]["code"] for _ in range(64)]
        assert codes == ["request_timeout"] * 64
    finally:
        sock.close()


def test_sixty_fifth_pending_request_is_refused(slow_commit_server) -> None:
    sock = hello(slow_commit_server)
    try:
        sock.sendall(b"".join(frame(ENQUEUE % (b"x%d" % i, b"cap-%d" % i)) for i in range(65)))
        first = read_frame(sock)
        assert first == {"version": 1, "type": "error", "request_id": "x64",
                         "error": {**first["error"], "code": "too_many_requests"}}
        rest = {read_frame(sock)["request_id"] for _ in range(64)}
        assert rest == {"x%d" % i for i in range(64)}
    finally:
        sock.close()
