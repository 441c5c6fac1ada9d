"""A blocking raw Executor-Protocol client for server tests: exact frames, no SDK in between
(an SDK would reconnect, retry or swallow the very replies these tests look at)."""

from __future__ import annotations

import itertools
import socket
from typing import Any

import orjson


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def read_frame(sock: socket.socket) -> dict | None:
    """The next frame, or None once the server closed the connection."""
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        return None
    return orjson.loads(sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))


class RawClient:
    """One connection; ``request`` sends a message and returns the frame with its id
    (frames for other ids, such as ``execute``, are kept in ``pushed``)."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.ids = itertools.count(1)
        self.pushed: list[dict] = []

    def hello(self, mode: str = "client", capacity: int = 0, runtime_id: str = "raw") -> dict:
        return self.request("hello", mode=mode, runtime_id=runtime_id, max_concurrency=capacity)

    def send(self, message_type: str, request_id: str | None = None, **fields: Any) -> str:
        request_id = request_id or f"r{next(self.ids)}"
        self.sock.sendall(frame(orjson.dumps(
            {"version": 1, "type": message_type, "request_id": request_id, **fields})))
        return request_id

    def reply(self, request_id: str) -> dict | None:
        for index, message in enumerate(self.pushed):
            if message.get("request_id") == request_id:
                return self.pushed.pop(index)
        while True:
            message = read_frame(self.sock)
            if message is None or message.get("request_id") == request_id:
                return message
            self.pushed.append(message)

    def request(self, message_type: str, **fields: Any) -> dict | None:
        return self.reply(self.send(message_type, **fields))

    def next_pushed(self, message_type: str) -> dict:
        """The next server-initiated message of ``message_type`` (execute, cancel_execution)."""
        for index, message in enumerate(self.pushed):
            if message["type"] == message_type:
                return self.pushed.pop(index)
        while True:
            message = read_frame(self.sock)
            assert message is not None, f"connection closed while waiting for {message_type}"
            if message["type"] == message_type:
                return message
            self.pushed.append(message)

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()
