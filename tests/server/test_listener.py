"""The server on a real Unix socket: bad frames close only their own connection."""

from __future__ import annotations

import socket
import time

import orjson
import psutil
import pytest

from tests.conformance.harness import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

HELLO = b'{"version":1,"type":"hello","request_id":"h","mode":"client","runtime_id":"c","max_concurrency":0}'


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def read_frame(sock: socket.socket) -> dict | None:
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        return None
    return orjson.loads(sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))


@pytest.fixture(scope="module")
def server():
    server = Server("--max-connections", "4").start()
    yield server
    server.close()


def connect(server: Server) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(server.socket)
    return sock


@pytest.mark.parametrize(("data", "code"), [
    (b"\x7f\xff\xff\xff", "frame_too_large"),
    (frame(b"{oops"), "malformed_json"),
    (frame(b'{"version":1,"type":"x","request_id":"r"}'), "unknown_message"),
    (frame(b'{"version":1,"type":"heartbeat","request_id":"r","d":' + b"[" * 40 + b"]" * 40 + b"}"),
     "invalid_frame"),
    (frame(b'{"version":1,"type":"heartbeat","request_id":"\xff"}'), "malformed_json"),
    (frame(b'{"version":2,"type":"heartbeat","request_id":"r"}'), "unsupported_version"),
    (frame(b'{"type":"heartbeat","request_id":"r"}'), "unsupported_version"),
    (b"\x00\x00\x00\x00", "invalid_frame"),
    (frame(b'{"version":1,"type":"heartbeat"}'), "invalid_frame"),
    (frame(b'{"version":1,"type":"heartbeat","request_id":""}'), "invalid_frame"),
    (frame(b'{"version":1,"v":2,"type":"heartbeat","request_id":"r"}'), "invalid_frame"),
    (frame(b'[1,2]'), "invalid_frame"),
])
def test_bad_frame_closes_only_that_connection(server: Server, data: bytes, code: str) -> None:
    good, bad = connect(server), connect(server)
    try:
        good.sendall(frame(HELLO))
        assert read_frame(good)["type"] == "hello_ok"
        bad.sendall(data)
        error = read_frame(bad)
        assert error["type"] == "error" and error["error"]["code"] == code
        assert "request_id" not in error
        assert bad.recv(1) == b""  # closed by the server
        good.sendall(frame(b'{"version":1,"type":"heartbeat","request_id":"b"}'))
        assert read_frame(good) == {"version": 1, "type": "heartbeat_ok", "request_id": "b"}
    finally:
        good.close()
        bad.close()


def test_connection_limit_accepts_then_closes(server: Server) -> None:
    held = [connect(server) for _ in range(4)]
    try:
        for sock in held:
            sock.sendall(frame(HELLO))
            assert read_frame(sock)["type"] == "hello_ok"
        extra = connect(server)
        assert extra.recv(1) == b""
        extra.close()
    finally:
        for sock in held:
            sock.close()


def test_slow_reader_is_paused_not_buffered_without_bound(server: Server) -> None:
    """A peer that sends requests but never reads replies: the server stops reading once its
    write buffer passes the high-water mark, so its memory stays flat however long we push."""
    process = psutil.Process(server.process.pid)
    rss_before = process.memory_info().rss
    sock = connect(server)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    beat = frame(b'{"version":1,"type":"heartbeat","request_id":"' + b"r" * 100 + b'"}')
    chunk = beat * 1000
    sock.setblocking(False)
    sent, deadline = 0, time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline and sent < 256 * 1024 * 1024:
            try:
                sent += sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)  # keep pushing: a bounded server never drains us again
        growth = process.memory_info().rss - rss_before
    finally:
        sock.close()
    assert sent < 32 * 1024 * 1024, f"the server kept reading ({sent} bytes)"
    assert growth < 24 * 1024 * 1024, f"server RSS grew by {growth} bytes"
    other = connect(server)
    other.sendall(frame(HELLO))
    assert read_frame(other)["type"] == "hello_ok"
    other.close()
