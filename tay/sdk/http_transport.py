"""A small asyncio HTTP/1.1 client with keep-alive, responses parsed by httptools.

Why not urllib or http.client: they block (a thread per request) and parse headers with
the email package; urllib also opens a connection per request and consults proxy
settings. This pool runs on the event loop, reuses idle connections (never one the peer
has closed or written to unasked), never follows redirects (a redirect is a
``ProtocolError``), ignores proxies, and stops reading a response past ``max_body``
bytes, so an oversized one is detected without buffering it whole.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import httptools

from tay.errors import ConnectionLost, ProtocolError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRY_SAFE = frozenset({"GET", "DELETE", "HEAD"})


class _PeerClosed(ConnectionError):
    """The peer closed a connection before any of the response arrived."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one exchange at a time."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.loop = asyncio.get_running_loop()  # once: each call is a getpid on 3.11
        self.transport: asyncio.Transport | None = None
        self.open = True
        self._response: asyncio.Future[tuple[int, bytes | None, bool]] | None = None
        self._parser: Any = None
        self._body: list[bytes] = []
        self._size = 0
        self._received_any = False
        self._headers_done = False
        self._delimited = False  # by Content-Length or chunks, rather than by the close

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._response is None or self._response.done():
            self._discard()  # bytes nobody asked for: never reuse this connection
            return
        self._received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("Tay answered with a protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"Tay's HTTP response is malformed: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self._response is not None and not self._response.done():
            if not self._received_any:
                self._response.set_exception(_PeerClosed(str(exc) if exc else "the peer closed the connection"))
            elif self._headers_done and not self._delimited:
                self._finish(truncated=False)  # a body without length or chunks ends at the close
            else:
                self._fail(ConnectionLost("the connection closed mid-response"))

    # -- httptools callbacks -------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":
            self._delimited = True
            if value.strip().isdigit() and int(value) > self.max_body:
                self._finish(truncated=True)  # refuse it without reading it
        elif name == b"transfer-encoding":
            self._delimited = True

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        self._body.append(body)
        if self._size > self.max_body:
            self._finish(truncated=True)

    def on_message_complete(self) -> None:
        self._finish(truncated=False)

    # -- exchanges -----------------------------------------------------------------------

    def _finish(self, *, truncated: bool) -> None:
        response = self._response
        if response is None or response.done():
            return
        status = self._parser.get_status_code()
        reusable = not truncated and self._parser.should_keep_alive() and self.open
        response.set_result((status, None if truncated else b"".join(self._body), reusable))

    def _fail(self, error: BaseException) -> None:
        if self._response is not None and not self._response.done():
            self._response.set_exception(error)
        self._discard()

    def _discard(self) -> None:
        self.open = False
        if self.transport is not None:
            try:
                self.transport.close()
            except RuntimeError:  # its event loop is closed already: so is the socket's use
                pass

    async def exchange(self, request: bytes, timeout: float) -> tuple[int, bytes | None, bool]:
        """Send one request; (status, body or None when it is over ``max_body``, whether
        the connection may be reused)."""
        assert self.transport is not None
        self._response = self.loop.create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._body, self._size, self._received_any = [], 0, False
        self._headers_done = self._delimited = False
        self.transport.write(request)
        timer = self.loop.call_later(timeout, self._time_out, timeout)
        try:
            return await self._response
        except BaseException:
            self._discard()
            raise
        finally:
            timer.cancel()
            self._response = None

    def _time_out(self, timeout: float) -> None:
        self._fail(TimeoutError(f"no complete response within {timeout:g}s"))


class HTTPTransport:
    """Pooled connections to one origin, used from one event loop at a time."""

    def __init__(self, *, scheme: str, host: str, port: int | None, timeout: float,
                 context: ssl.SSLContext | None, max_body: int, pool_size: int = 8) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port if port is not None else (443 if scheme == "https" else 80)
        self.timeout = timeout
        self.context = context
        self.max_body = max_body
        self.pool_size = pool_size
        default_port = 443 if scheme == "https" else 80
        netloc = f"[{host}]" if ":" in host else host
        self._host_header = netloc if self.port == default_port else f"{netloc}:{self.port}"
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _checkout(self) -> tuple[_Connection, bool]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self.close()
            self._loop = loop
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection, True
        return await self._connect(), False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(self.max_body), self.host, self.port, ssl=self.context,
                server_hostname=self.host if self.context is not None else None), self.timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        return connection

    def _checkin(self, connection: _Connection) -> None:
        if connection.open and len(self._idle) < self.pool_size:
            self._idle.append(connection)
        else:
            connection._discard()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection._discard()

    def _request_bytes(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    async def exchange(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        """Send one request; returns (status, body)."""
        request = self._request_bytes(method, path, body, headers)
        connection, reused = await self._checkout()
        try:
            status, data, reusable = await self._exchange_on(connection, request, method, path)
        except _PeerClosed as exc:
            # A kept-alive connection the server had just closed: the request never got
            # in. Only idempotent methods are retried; a POST outcome stays unknown.
            if not (reused and method in _RETRY_SAFE):
                raise ConnectionLost(f"{method} {path}: {exc!r}; the outcome is unknown") from exc
            connection = await self._connect()
            status, data, reusable = await self._exchange_on(connection, request, method, path)
        if status in _REDIRECTS:
            connection._discard()
            raise ProtocolError(f"Tay answered {method} {path} with a redirect ({status}); redirects are refused")
        if data is None:
            connection._discard()
            raise ProtocolError(f"Tay's response to {method} {path} exceeds {self.max_body} bytes")
        if reusable:
            self._checkin(connection)
        else:
            connection._discard()  # unread remainder or server-side close: never reuse
        return status, data

    async def _exchange_on(self, connection: _Connection, request: bytes, method: str,
                           path: str) -> tuple[int, bytes | None, bool]:
        try:
            return await connection.exchange(request, self.timeout)
        except (_PeerClosed, ProtocolError, ConnectionLost):
            raise
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"{method} {path} to {self.host}: {exc!r}; the outcome is unknown") from exc
