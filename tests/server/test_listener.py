"""The server on a real Unix socket: bad frames close only their own connection."""

from __future__ import annotations

import socket

import orjson
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
    sock = connect(server)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    beat = frame(b'{"version":1,"type":"heartbeat","request_id":"' + b"r" * 100 + b'"}')
    sock.setblocking(False)
    sent = 0
    try:
        while sent < 64 * 1024 * 1024:
            sent += sock.send(beat * 1000)
    except BlockingIOError:
        pass  # the server stopped reading: our send buffer filled up
    finally:
        sock.close()
    assert sent < 64 * 1024 * 1024
    other = connect(server)
    other.sendall(frame(HELLO))
    assert read_frame(other)["type"] == "hello_ok"
    other.close()
