"""Test applications against the real engine, inside the test process.

``InMemoryEngine`` runs tay's engine and its driver on the test's event loop with a
volatile store: every event is encoded as for the journal, then kept in memory and
acknowledged at once. Your ``Tay`` instances (embedded, client or worker mode) connect to
it through an in-memory pipe that speaks the same Executor Protocol v1 frames as the
socket, so options, retries and backoff, timeouts, cancellation, idempotent submissions,
results and schedules behave as they do under ``tay serve``; the tasks run in the same
loop (sync ones in the client's threads). ``TayHTTP`` producers and ``TayHTTPWorker``
workers attach the same way: their HTTP/1.1 requests reach the server's own HTTP layer
(routes, bodies, worker sessions and long-polled claims) over the same kind of pipe. There
is no socket, no port, no data directory, nothing left behind. ``advance(seconds)`` moves the engine's clock forward, so a retry backoff or
a delay is not waited out in real time.

    async def test_checkout():
        async with InMemoryEngine() as engine:
            engine.attach(app.tay)
            async with app.tay:
                job = await app.add.enqueue(2, 5)
                assert await job.result(timeout=5) == {"sum": 7}
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from tay.engine.config import EngineConfig
from tay.errors import ConnectionLost
from tay.protocol.limits import ProtocolLimits
from tay.server.uds.connection import Connection
from tay.server.driver import EngineDriver, mono_ms, wall_ms
from tay.server.uds.listener import Listener

P = TypeVar("P", bound=asyncio.Protocol)

__all__ = ["InMemoryEngine"]


class MemoryCommitter:
    """The volatile store behind the driver's committer interface: it counts the encoded
    records and covers every ticket at once (nothing waits for a disk)."""

    holds = False  # no group commit: nothing to flush per loop turn
    linger = False
    covers_at_once = True  # every ticket is durable as it is appended: no completion signal
    stopped = None  # a memory store never stops writing

    def __init__(self) -> None:
        self.records = 0
        self.durable = 0
        # The driver watches this fd for "a batch became durable"; it never has to fire here.
        self.completion_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if hasattr(os, "eventfd") \
            else os.pipe()[0]

    def append(self, records: list[tuple[int, int, int, bytes]], hold: bool = False) -> int:
        self.records += len(records)
        self.durable += 1
        return self.durable

    def flush(self) -> None:
        pass

    def drain_completions(self) -> None:
        pass

    def completed(self) -> int:
        return self.durable

    def close(self) -> None:
        if self.completion_fd >= 0:
            os.close(self.completion_fd)
            self.completion_fd = -1


class InMemoryEngine:
    """The real engine for one test: ``async with InMemoryEngine() as engine``."""

    def __init__(self, config: EngineConfig | None = None, *, limits: ProtocolLimits | None = None,
                 seed: int | None = None) -> None:
        self.config = config or EngineConfig()
        self.limits = limits or ProtocolLimits()
        self.seed = seed
        self.committer: Any = None  # a MemoryCommitter while running
        self.engine: Any = None
        self._driver: EngineDriver | None = None
        self._listener: Listener | None = None
        self._http: Any = None  # tay.server.http.listener.HttpServer, never listening
        self._offset_ms = 0
        self._pipes: list[_Pipe] = []

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> Self:
        from tay.engine import Engine

        if self._driver is not None:
            return self
        self.committer = MemoryCommitter()
        self.engine = Engine(self.config,
                             random.Random(self.seed) if self.seed is not None else None)
        clock: tuple[Callable[[], int], Callable[[], int]] = (
            lambda: wall_ms() + self._offset_ms, lambda: mono_ms() + self._offset_ms)
        self.engine.finish_recovery(clock[0](), clock[1]())
        self._driver = EngineDriver(self.engine, self.committer, asyncio.get_running_loop(), clock)
        self._listener = Listener(self._driver, self.limits)
        self._http = _http_server(self._driver, self.limits)
        self._driver.tick()
        return self

    async def close(self) -> None:
        """Disconnect every attached client's pipe and stop the engine's timers."""
        if self._http is not None:  # ends HTTP worker sessions as a shutdown would
            await self._http.close(settle_timeout_s=1.0)
            self._http = None
        for pipe in list(self._pipes):
            pipe.close()
        await asyncio.sleep(0)  # let the disconnects reach both ends
        if self._driver is not None:
            self._driver.close()
            self.committer.close()
        self._driver = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback_: TracebackType | None) -> None:
        await self.close()

    # -- clients -------------------------------------------------------------------------

    def attach(self, *clients: Any) -> None:
        """Make these ``Tay``, ``TayHTTP`` or ``TayHTTPWorker`` instances connect here
        instead of to a socket or a port (before they send anything)."""
        from tay.sdk.client import Tay
        from tay.sdk.http import TayHTTP

        for client in clients:
            if isinstance(client, Tay):
                client._open_transport = self._open_transport
            elif isinstance(client, TayHTTP):
                transport = client._transport
                transport.close()  # pooled connections to a real port are not ours
                transport._connect = lambda transport=transport: self._open_http(transport)
            else:
                raise TypeError("InMemoryEngine serves Tay, TayHTTP and TayHTTPWorker instances, "
                                f"not {type(client).__name__}")

    async def _open_transport(self, new_protocol: Callable[[], P]) -> tuple[asyncio.Transport, P]:
        """What ``loop.create_unix_connection`` gives, over a pair of in-memory pipes."""
        if self._listener is None:
            raise ConnectionRefusedError("the InMemoryEngine is not running (use `async with InMemoryEngine()`)")
        client_side = self._pipe(new_protocol(), Connection(self._listener))
        return self._pipes[-2], client_side

    async def _open_http(self, transport: Any) -> Any:
        """What ``HTTPTransport._connect`` gives: a connection to the server's HTTP layer."""
        from tay.sdk.http_transport import _Connection
        from tay.server.http.listener import HttpConnection

        if self._http is None:
            raise ConnectionLost("the InMemoryEngine is not running (use `async with InMemoryEngine()`)")
        return self._pipe(_Connection(transport.max_body), HttpConnection(self._http))

    def _pipe(self, client_side: P, server_side: asyncio.Protocol) -> P:
        loop = asyncio.get_running_loop()
        to_server, to_client = _Pipe(loop, server_side), _Pipe(loop, client_side)
        to_server.peer, to_client.peer = to_client, to_server
        self._pipes += [to_server, to_client]
        server_side.connection_made(to_client)
        client_side.connection_made(to_server)
        return client_side

    # -- time and inspection ------------------------------------------------------------------

    async def advance(self, seconds: float) -> None:
        """Move the engine's clock ``seconds`` forward and run what became due."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset_ms += round(seconds * 1000)
        if self._driver is not None:
            self._driver.tick()
        for _ in range(3):  # let the released effects reach the clients
            await asyncio.sleep(0)

    def state_counts(self) -> dict[str, int]:
        """Jobs by state, straight from the engine."""
        counts: dict[str, int] = self.engine.state_counts()
        return counts


class _Pipe(asyncio.Transport):
    """One direction of an in-memory connection: ``write`` feeds the peer's protocol on
    the next loop turn, in order; ``close`` ends both sides like a socket close."""

    def __init__(self, loop: asyncio.AbstractEventLoop, receiver: asyncio.Protocol) -> None:
        super().__init__()
        self.loop = loop
        self.receiver = receiver  # the protocol this pipe delivers to
        self.peer: _Pipe | None = None
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self.loop.call_soon(self._deliver, bytes(data))

    def _deliver(self, data: bytes) -> None:
        if not self._closing:
            self.receiver.data_received(data)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self.peer is not None:
            self.peer.close()
        self.loop.call_soon(self.receiver.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # memory is the buffer; a test's peers are well behaved

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _http_server(driver: EngineDriver, limits: ProtocolLimits) -> Any:
    """The server's HTTP layer with its default limits, answering pipes instead of a port."""
    from tay.protocol.http_api import HttpApi
    from tay.server.http.config import HttpLimits
    from tay.server.http.listener import HttpServer

    http_limits = HttpLimits()
    return HttpServer(driver, HttpApi(http_limits.max_body_bytes, limits), http_limits)
