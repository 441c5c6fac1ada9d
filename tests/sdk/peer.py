"""A scripted Executor Protocol v1 peer on a real Unix socket, for SDK client tests.

It records every message it receives and answers with a per-type handler. It is a test
double of the *wire* (like a fake transport), used to pin down exactly what the SDK sends
and how it reacts; the end-to-end tests run against the real ``tay serve``.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

import orjson

Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


def default_reply(message: dict[str, Any]) -> dict[str, Any] | None:
    kind = message["type"]
    if kind in ("started", "succeeded", "failed", "pong"):
        return {"type": "accepted"}
    replies = {
        "hello": {"type": "hello_ok", "mode": message.get("mode")},
        "register_tasks": {"type": "tasks_registered", "tasks": message.get("tasks")},
        "unregister_tasks": {"type": "tasks_unregistered", "tasks": message.get("tasks")},
        "enqueue": {"type": "enqueued", "job_id": "0" * 31 + "1",
                    "job": {"id": "0" * 31 + "1", "durability": message.get("options", {}).get("durability", "persistent")}},
        "schedule": {"type": "scheduled", "schedule_id": message.get("declaration_id", "sched-1")},
        "cancel_schedule": {"type": "schedule_cancelled", "schedule": {"id": message.get("schedule_id"), "cancelled_at": 5}},
    }
    return replies.get(kind, {"type": "error", "error": {"code": "unsupported_request"}})


class Peer:
    def __init__(self, path: str) -> None:
        self.path = path
        self.received: list[dict[str, Any]] = []
        self.handlers: dict[str, Handler] = {}
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0
        self.arrived = asyncio.Condition()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> Peer:
        self._server = await asyncio.start_unix_server(self._serve, self.path)
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_all()
        await self._server.wait_closed()

    def drop_all(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    def send(self, message: dict[str, Any], index: int = -1) -> None:
        payload = orjson.dumps({"version": 1, **message})
        self.writers[index].write(struct.pack(">I", len(payload)) + payload)

    def types(self) -> list[str]:
        return [message["type"] for message in self.received]

    async def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 3.0) -> None:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: predicate(self.received)), timeout)

    async def wait_type(self, kind: str, count: int = 1) -> dict[str, Any]:
        await self.wait_for(lambda received: sum(m["type"] == kind for m in received) >= count)
        return [m for m in self.received if m["type"] == kind][count - 1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                (length,) = struct.unpack(">I", await reader.readexactly(4))
                message = orjson.loads(await reader.readexactly(length))
                async with self.arrived:
                    self.received.append(message)
                    self.arrived.notify_all()
                reply = self.handlers.get(message["type"], default_reply)(message)
                if reply is not None and writer in self.writers:
                    payload = orjson.dumps({"version": 1, "request_id": message["request_id"], **reply})
                    writer.write(struct.pack(">I", len(payload)) + payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
