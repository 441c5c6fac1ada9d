"""A minimal raw Executor-Protocol client for crash tests: length-prefixed JSON frames over
the Unix socket, replies matched by ``request_id``, server pushes (``execute``) queued.

Raw frames, not an SDK, so a test sees exactly which replies arrived before a kill: an SDK
would retry, reconnect or hide a lost reply.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any


class ConnectionLost(Exception):
    """The server went away before replying (the outcome of that request is unknown)."""


class WireClient:
    """One connection. ``request`` returns the reply frame, or raises ``ConnectionLost``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.pushed: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.ids = itertools.count(1)
        self.reading = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def connect(cls, socket_path: str, mode: str = "client", capacity: int = 0) -> "WireClient":
        reader, writer = await asyncio.open_unix_connection(socket_path)
        client = cls(reader, writer)
        reply = await client.request("hello", mode=mode, runtime_id=f"crash-{mode}",
                                     max_concurrency=capacity)
        if reply["type"] != "hello_ok":
            raise AssertionError(f"hello refused: {reply}")
        return client

    async def _read_loop(self) -> None:
        try:
            while True:
                header = await self.reader.readexactly(4)
                (length,) = struct.unpack(">I", header)
                frame = json.loads(await self.reader.readexactly(length))
                future = self.pending.pop(frame.get("request_id", ""), None)
                if future is not None and not future.done():
                    future.set_result(frame)
                else:
                    self.pushed.put_nowait(frame)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(ConnectionLost())
            self.pending.clear()
            self.pushed.put_nowait(None)

    def send(self, message_type: str, request_id: str | None = None, **fields: Any) -> str:
        """Write one frame without waiting; returns its request_id."""
        request_id = request_id or f"q{next(self.ids)}"
        body = json.dumps({"version": 1, "type": message_type, "request_id": request_id,
                           **fields}).encode()
        self.writer.write(struct.pack(">I", len(body)) + body)
        return request_id

    async def request(self, message_type: str, **fields: Any) -> dict[str, Any]:
        if self.reading.done():
            raise ConnectionLost()
        request_id = f"q{next(self.ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        try:
            self.send(message_type, request_id, **fields)
        except (ConnectionError, OSError):
            self.pending.pop(request_id, None)
            raise ConnectionLost() from None
        return await future

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
        self.reading.cancel()


async def serve_executions(client: "WireClient", stop: asyncio.Event,
                           execute: Callable[[dict[str, Any]], Awaitable[None]],
                           received: Callable[[dict[str, Any]], None] = lambda frame: None
                           ) -> None:
    """Run ``execute(frame)`` as a task for each ``execute`` frame pushed to ``client``
    (``received(frame)`` first, in arrival order) until ``stop`` is set or the connection
    drops, then wait up to 5 s for the ones still running."""
    running: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        getter = asyncio.ensure_future(client.pushed.get())
        stopper = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if getter not in done:
            getter.cancel()
            break
        frame = getter.result()
        if frame is None:  # connection lost
            break
        if frame.get("type") != "execute":
            continue
        received(frame)
        task = asyncio.ensure_future(execute(frame))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.wait(running, timeout=5)


async def enqueue_until_refused(socket_path: str, *, task: str, pad: int, limit: int,
                                what: str) -> tuple[dict[str, dict], dict | None]:
    """Enqueue jobs with ``pad`` bytes of argument one by one (at most ``limit``) until a
    reply is not ``enqueued``; return the acked jobs by submission id and that reply (None
    if the connection dropped). ``what`` names the limit the caller expects to reach."""
    client = await WireClient.connect(socket_path)
    acked: dict[str, dict] = {}
    try:
        for index in range(limit):
            submission = f"{task}-{index}"
            try:
                reply = await client.request("enqueue", task=task,
                                             args={"n": index, "pad": "p" * pad},
                                             options={"submission_id": submission})
            except ConnectionLost:
                return acked, None
            if reply["type"] != "enqueued":
                return acked, reply
            acked[submission] = reply["job"]
    finally:
        await client.close()
    raise AssertionError(f"{what} was never reached")
