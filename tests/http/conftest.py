"""Shared HTTP test helpers: a real store + engine + driver behind an ``HttpServer``, a
uvicorn-style fake transport, and a response parser for the bytes it collected."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httptools
import orjson

from tay.protocol.http_api import HttpApi
from tay.server.admin import AdminService
from tay.server.app import ServeConfig, open_store
from tay.server.driver import EngineDriver
from tay.server.http.config import HttpLimits
from tay.server.http.listener import HttpConnection, HttpServer
from tests.scratch import scratch_root

SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is


@contextlib.asynccontextmanager
async def http_stack(limits: HttpLimits | None = None,
                     spare_connections=lambda: 1 << 30) -> AsyncIterator[HttpServer]:
    """An ``HttpServer`` on a fresh store (durability ``write``), closed afterwards."""
    SCRATCH.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="http-", dir=SCRATCH)
    config = ServeConfig(data_dir=f"{root}/data", socket=None, init_if_missing=True,
                         durability="write")
    store = open_store(config)
    driver = EngineDriver(store.engine, store.committer, asyncio.get_running_loop())
    limits = limits or HttpLimits()
    server = HttpServer(driver, HttpApi(limits.max_body_bytes), limits, spare_connections)
    server.admin = AdminService(driver, store, config)
    try:
        yield server
    finally:
        await server.close()
        driver.close()
        store.close()
        shutil.rmtree(root, ignore_errors=True)


async def until(condition, what: str, timeout: float = 5.0) -> None:
    """Wait for ``condition()`` to hold (checked every loop turn), never a fixed sleep."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError(f"not reached in {timeout} s: {what}")
        await asyncio.sleep(0.001)


def claim_waiting(server: HttpServer) -> bool:
    """Some worker session has a long-polling claim parked on the server."""
    return any(session.waiter is not None for session in server.sessions.sessions.values())


class FakeTransport:
    """Collects written bytes; records close and reading pauses (like uvicorn's tests)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.eof_written = False
        self.reading = True
        self.protocol: HttpConnection | None = None

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.written += data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default=None):
        return default

    def set_protocol(self, protocol) -> None:  # the h2c preface hands the connection over
        self.protocol = protocol

    def get_protocol(self):
        return self.protocol


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""

    def json(self):
        return orjson.loads(self.body)

    @property
    def code(self) -> str | None:
        return self.json()["error"]["code"] if self.body else None


def parse_responses(data: bytes) -> list[Response]:
    responses: list[Response] = []

    class Sink:
        def on_message_begin(self):
            responses.append(Response(0))

        def on_header(self, name, value):
            responses[-1].headers[name.lower()] = value

        def on_headers_complete(self):
            responses[-1].status = parser.get_status_code()

        def on_body(self, body):
            responses[-1].body += body

    parser = httptools.HttpResponseParser(Sink())
    parser.feed_data(bytes(data))
    return responses


class Client:
    """One fake connection to ``server``."""

    def __init__(self, server: HttpServer) -> None:
        self.transport = FakeTransport()
        self.connection = HttpConnection(server)
        self.transport.protocol = self.connection
        self.connection.connection_made(self.transport)

    def send(self, data: bytes) -> None:
        self.transport.protocol.data_received(data)  # the protocol in charge now (h1 or h2)

    async def responses(self, count: int, timeout: float = 5.0) -> list[Response]:
        """Wait until ``count`` complete responses were written (or the transport closed)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            got = parse_responses(self.transport.written)
            complete = [r for r in got if r.status]
            if len(complete) >= count or self.transport.closed:
                return complete
            await asyncio.sleep(0.005)
        raise AssertionError(f"only {self.transport.written!r} after {timeout} s")

    async def call(self, data: bytes) -> Response:
        before = len(parse_responses(self.transport.written))
        self.send(data)
        return (await self.responses(before + 1))[before]


def request(method: str, path: str, body: bytes | dict | None = None, *,
            content_type: bytes | None = b"application/json",
            headers: tuple[bytes, ...] = ()) -> bytes:
    """A literal HTTP/1.1 request."""
    if isinstance(body, dict):
        body = orjson.dumps(body)
    lines = [f"{method} {path} HTTP/1.1".encode(), b"host: t"]
    if content_type is not None and body is not None:
        lines.append(b"content-type: " + content_type)
    lines.extend(headers)
    if body is not None:
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def run(coro):
    return asyncio.run(coro)
