"""Idle and half-open sockets cannot lock clients out of a real ``tay serve``: hello and frame
deadlines close them, and at the connection limit a silent connection makes room for a
new one. Connections that said hello may stay idle as long as they like."""

from __future__ import annotations

import socket
import time

import pytest

from tests.conformance.harness import Server

from .raw import RawClient, frame, read_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

LIMIT = 4
HEARTBEAT = frame(b'{"version":1,"type":"heartbeat","request_id":"b"}')


@pytest.fixture(scope="module")
def server():
    server = Server("--max-connections", str(LIMIT), "--hello-timeout-ms", "400",
                    "--frame-timeout-ms", "400").start()
    yield server
    server.close()


def fatal_code(sock: socket.socket) -> str:
    message = read_frame(sock)
    assert message is not None and "request_id" not in message, message
    assert sock.recv(1) == b""  # then closed
    return message["error"]["code"]


def test_a_connection_that_never_says_hello_is_closed(server: Server) -> None:
    client = RawClient(server.socket)
    started = time.monotonic()
    try:
        assert fatal_code(client.sock) == "hello_timeout"
        assert 0.3 < time.monotonic() - started < 3
    finally:
        client.close()


def test_half_a_frame_is_closed_after_the_frame_deadline(server: Server) -> None:
    client = RawClient(server.socket)
    try:
        client.hello()
        client.sock.sendall(HEARTBEAT[:10])
        assert fatal_code(client.sock) == "frame_timeout"
    finally:
        client.close()


def test_slow_frames_that_each_complete_in_time_are_served(server: Server) -> None:
    """Frames split across reads: each completes within 400 ms of its own first byte, though
    the buffer is never empty for longer than that."""
    client = RawClient(server.socket)
    try:
        client.hello()
        stream = HEARTBEAT * 4
        step = len(HEARTBEAT)
        client.sock.sendall(stream[:step // 2])
        for start in range(step // 2, len(stream), step):
            time.sleep(0.25)
            client.sock.sendall(stream[start:start + step])
        replies = [read_frame(client.sock) for _ in range(4)]
        assert [r["type"] for r in replies] == ["heartbeat_ok"] * 4
    finally:
        client.close()


def test_after_hello_an_idle_connection_stays(server: Server) -> None:
    client = RawClient(server.socket)
    try:
        client.hello()
        time.sleep(0.9)  # past both deadlines, with nothing partial
        assert client.request("heartbeat")["type"] == "heartbeat_ok"
    finally:
        client.close()


def test_silent_connections_make_room_for_a_client_that_says_hello(server: Server) -> None:
    silent = [RawClient(server.socket) for _ in range(LIMIT)]  # the whole table, no hello
    try:
        client = RawClient(server.socket)
        started = time.monotonic()
        assert client.hello()["type"] == "hello_ok"
        assert time.monotonic() - started < 0.3  # served now, not after a deadline
        assert fatal_code(silent[0].sock) == "connection_limit"  # the oldest made room
        client.close()
    finally:
        for sock in silent:
            sock.close()


def test_when_every_connection_said_hello_a_newcomer_is_refused(server: Server) -> None:
    time.sleep(0.5)  # earlier tests' connections are gone
    held = [RawClient(server.socket) for _ in range(LIMIT)]
    try:
        for client in held:
            assert client.hello()["type"] == "hello_ok"
        extra = RawClient(server.socket)
        assert extra.closed_by_server()
        extra.close()
        assert held[0].request("heartbeat")["type"] == "heartbeat_ok"
    finally:
        for client in held:
            client.close()
