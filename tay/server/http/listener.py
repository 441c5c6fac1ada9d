"""The HTTP/JSON listener: uvloop transports, httptools parsing, optional mTLS.

HTTP/1.1 with keep-alive and pipelining (responses leave in request order). Bounds: the
request line plus headers (``max_header_bytes``, ``max_headers``), the body
(``max_body_bytes``, checked against Content-Length before reading and while streaming),
the pipeline depth (reading pauses beyond it), and time: a request must arrive whole
within ``request_timeout_s`` of its first byte, and an idle keep-alive connection closes
after ``keepalive_timeout_s``. Routing and bodies are sans-IO (``tay.protocol.http_api``);
worker sessions live in ``http_sessions`` and configuration in ``http_config``. The end of
this module holds the ``tay serve`` entry points.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from typing import Any, Callable

import httptools
import orjson

from tay.engine import commands as engine
from tay.failures import RequestRefused
from tay.protocol.admin_api import AdminRequest
from tay.protocol.http_api import (
    HttpApi, HttpRequest, HttpResponse, OpsEndpoint, ProducerCall, RegisterWorker, WorkerCall,
    effect_response, error_response,
)
from tay.protocol.limits import ProtocolLimits

from ..driver import EngineDriver
from ..engine_port import EnginePort
from ..peers import tcp_peer
from .config import HttpConfig, HttpLimits, tls_context
from .sessions import SessionRegistry

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what a prior-knowledge h2c client sends first

log = logging.getLogger("tay.server.http")

_REASONS = {200: b"OK", 201: b"Created", 204: b"No Content", 303: b"See Other",
            400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden", 404: b"Not Found",
            405: b"Method Not Allowed",
            409: b"Conflict", 410: b"Gone", 413: b"Content Too Large",
            415: b"Unsupported Media Type", 429: b"Too Many Requests",
            500: b"Internal Server Error", 503: b"Service Unavailable"}
# an enqueue's args come from decode_message (orjson.loads), as on the socket: DecodedEnqueue
_PRODUCER_COMMANDS = {"enqueue": engine.DecodedEnqueue, "status": engine.Status,
                      "cancel": engine.Cancel, "result": engine.Result}
_SCHEDULE_COMMANDS = {"schedule": engine.Schedule, "cancel_schedule": engine.CancelSchedule,
                      "schedules": engine.ListSchedules, "schedule_status": engine.ScheduleStatus}


class _Abort(Exception):
    """Raised inside a parser callback: answer ``response`` and close."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


def encode_response(response: HttpResponse, keep_alive: bool, head_only: bool = False) -> bytes:
    reason = _REASONS.get(response.status, b"Unknown")
    lines = [b"HTTP/1.1 %d %s" % (response.status, reason)]
    lines.extend(name + b": " + value for name, value in response.headers)
    if response.status != 204:
        lines.append(b"content-length: %d" % len(response.body))
    if not keep_alive:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head_only else response.body)


class HttpServer:
    """Listener-lifetime state: the API, the producer port, sessions and connections."""

    def __init__(self, driver: EngineDriver, api: HttpApi, limits: HttpLimits,
                 spare_connections: Callable[[], int] = lambda: 1 << 30) -> None:
        self.driver = driver
        self.api = api
        self.limits = limits
        self.producer = EnginePort(driver, "h")
        self.sessions = SessionRegistry(
            driver, max_sessions=lambda: spare_connections() - len(self.sessions),
            max_body_bytes=limits.max_body_bytes, claim_wait_s=limits.claim_wait_s,
            idle_s=limits.session_idle_s)
        self.connections: set[HttpConnection] = set()
        self.bound_port: int | None = None
        self.admin: Any = None  # the AdminService (docs/admin.md)
        self.ui: Any = None  # the Dashboard mounted under /ui (docs/dashboard.md)
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: HttpConnection(self), host, port, ssl=tls, reuse_address=True,
                ssl_handshake_timeout=10.0 if tls is not None else None)
        except OSError as error:  # taken since the pre-flight probe: still a sentence
            from ..preflight import StartupRefused, port_sentence

            raise StartupRefused("--http-port", port_sentence(host, port, error)) from None
        bound = self._server.sockets[0].getsockname()[1]
        log.info("tay listening on %s://%s:%d", "https" if tls else "http", host, bound)
        return bound

    @staticmethod
    def response(future: "asyncio.Future[HttpResponse]") -> HttpResponse:
        """What a finished ``handle`` future answers: its response, or a logged 500 for a
        handler that failed."""
        error = future.exception()
        if error is None:
            return future.result()
        log.error("HTTP request handler failed", exc_info=error)
        return error_response(RequestRefused("internal server error", code="internal"))

    def handle(self, request: HttpRequest) -> "asyncio.Future[HttpResponse]":
        """Start answering one request; the future resolves with its response."""
        loop = self.driver.loop
        if self.ui is not None and _is_ui(request.target):
            return loop.create_task(self.ui.handle(request))
        route = self.api.route(request)
        if isinstance(route, HttpResponse):
            done: asyncio.Future[HttpResponse] = loop.create_future()
            done.set_result(route)
            return done
        if isinstance(route, ProducerCall):
            return loop.create_task(self._producer(route))
        if isinstance(route, AdminRequest):
            return loop.create_task(self._admin(route, request.peer))
        if isinstance(route, OpsEndpoint):
            done = loop.create_future()
            done.set_result(self._ops(route.name))
            return done
        if isinstance(route, RegisterWorker):
            return loop.create_task(self.sessions.register(route))
        assert isinstance(route, WorkerCall)
        return loop.create_task(self.sessions.handle(route))

    async def _producer(self, call: ProducerCall) -> HttpResponse:
        """Job calls take keyword fields; schedule calls take the body as the socket does."""
        command = _PRODUCER_COMMANDS.get(call.kind)
        if command is not None:
            reply = await self.producer.request(
                lambda rid: command(self.producer, rid, **call.fields),
                call.size if call.kind == "enqueue" else None)
        else:
            command = _SCHEDULE_COMMANDS[call.kind]
            reply = await self.producer.request(
                lambda rid: command(self.producer, rid, call.fields))
        return effect_response(reply, self.limits.max_body_bytes)

    def _ops(self, name: str) -> HttpResponse:
        if name == "healthz":  # alive: the loop answers
            return HttpResponse(200, b'{"status":"alive"}')
        if self.admin is None:
            return error_response(RequestRefused("the operations API is not running",
                                                 code="unavailable"))
        if name == "metrics":
            return HttpResponse(200, self.admin.metrics_text(), headers=(
                (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),))
        ready, body = self.admin.readiness()
        return HttpResponse(200 if ready else 503, orjson.dumps(body))

    async def _admin(self, request: AdminRequest, peer: str) -> HttpResponse:
        if self.admin is None:
            return error_response(RequestRefused("the operations API is not running",
                                                 code="unavailable"))
        reply = await self.admin.call(request.op, request.body, f"http {peer}")
        return effect_response(reply, self.limits.max_body_bytes)

    async def close(self, settle_timeout_s: float = 5.0) -> None:
        """Stop accepting, let durable replies already in flight be written, then close."""
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle_timeout_s
        while not self.driver.idle and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # let released replies run their response callbacks
        self.sessions.close()
        for connection in list(self.connections):
            connection.shutdown()
        if self._server is not None:
            await self._server.wait_closed()
        self.producer.detach()


class HttpConnection(asyncio.Protocol):
    """One client connection: parser state, the ordered response pipeline and timers."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: Any = None
        self.peer = ""  # tcp_peer(transport), for the operator's log
        self.parser = httptools.HttpRequestParser(self)
        # (response future, keep-alive, HEAD: headers only)
        self.pipeline: deque[tuple[asyncio.Future[HttpResponse], bool, bool]] = deque()
        self.closing = False
        self.paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._write_paused = False
        self._linger = False  # the peer may still be sending a request we refused
        self._sniffing = False  # plain TCP: the first bytes may be the HTTP/2 preface
        self._sniffed = b""
        self._drain_left: int | None = None  # lingering: bytes still to read and discard
        self._reset_message()

    # -- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.peer = tcp_peer(transport)
        self.server.connections.add(self)
        self._arm(self.limits.keepalive_timeout_s)
        tls = transport.get_extra_info("ssl_object")
        if tls is None:
            self._sniffing = True
        elif tls.selected_alpn_protocol() == "h2":
            self._become_http2(b"")

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self._cancel_timer()
        self.abort_pending()

    def pause_writing(self) -> None:
        """The peer is not reading its responses: stop reading its requests."""
        self._write_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self.closing and not self.paused:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._drain_left is not None:
            self._drain(len(data))
            return
        if self.closing:
            return
        if self._sniffing:
            data = self._sniff(data)
            if not data:
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if not isinstance(cause, _Abort):
                raise
            self._fail(cause.response)
        except httptools.HttpParserUpgrade:
            self._finish_after_pipeline()  # protocol upgrades are not offered
        except httptools.HttpParserError as error:
            self._fail(error_response(RequestRefused(
                f"malformed HTTP request: {error}", code="invalid_request")))

    def _sniff(self, data: bytes) -> bytes:
        """Prior-knowledge h2c starts with the HTTP/2 preface: hand the connection over.
        Returns the bytes to parse as HTTP/1.1 (none while a preface prefix is pending)."""
        data = self._sniffed + data
        if PREFACE.startswith(data):  # a partial preface (or all of it, and nothing else)
            if len(data) < len(PREFACE):
                self._sniffed = data
                return b""
        elif not data.startswith(PREFACE):
            self._sniffing = False
            self._sniffed = b""
            return data
        self._become_http2(data)
        return b""

    def _become_http2(self, received: bytes) -> None:
        """Hand the transport to an ``Http2Connection`` (same server, same routes)."""
        from .http2 import Http2Connection

        self._sniffing = False
        self.closing = True  # this object is done; the transport now feeds the new one
        self._cancel_timer()
        self.server.connections.discard(self)
        successor = Http2Connection(self.server)
        transport, self.transport = self.transport, None
        transport.set_protocol(successor)
        successor.connection_made(transport)
        if received:
            successor.data_received(received)

    def shutdown(self) -> None:
        """Server shutdown: abandon requests in flight and close."""
        self.abort_pending()
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> None:
        """The peer finished sending: a lingering close is over (the transport closes)."""
        self._drain_left = None

    # -- httptools callbacks ---------------------------------------------------------
    def _reset_message(self) -> None:
        self.url = bytearray()
        self.headers: list[tuple[bytes, bytes]] = []
        self.header_bytes = 0
        self.body = bytearray()

    def on_message_begin(self) -> None:
        self._reset_message()
        self._in_request = True
        self._arm(self.limits.request_timeout_s)

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        if len(self.headers) >= self.limits.max_headers:
            raise _Abort(_too_large(f"more than {self.limits.max_headers} headers"))
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        for name, value in self.headers:
            if name == b"content-length" and value.strip().isdigit() \
                    and int(value) > self.limits.max_body_bytes:
                raise _Abort(_too_large(f"body of {int(value)} bytes exceeds "
                                        f"{self.limits.max_body_bytes}"))
        if (b"expect", b"100-continue") in ((n, v.lower()) for n, v in self.headers) \
                and not self.pipeline:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for it

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk
        if len(self.body) > self.limits.max_body_bytes:
            raise _Abort(_too_large(f"body exceeds {self.limits.max_body_bytes} bytes"))

    def on_message_complete(self) -> None:
        self._in_request = False
        keep_alive = self.parser.should_keep_alive()
        request = HttpRequest(self.parser.get_method().decode("ascii", "replace"),
                              self.url.decode("latin-1"), tuple(self.headers), bytes(self.body),
                              self.parser.get_http_version(), self.peer)
        self._reset_message()
        try:
            future = self.server.handle(request)
        except Exception as error:  # a router bug must not take the connection down silently
            log.error("HTTP router failed", exc_info=error)
            future = self.server.driver.loop.create_future()
            future.set_result(error_response(RequestRefused("internal server error",
                                                            code="internal")))
        self.pipeline.append((future, keep_alive, request.method == "HEAD"))
        future.add_done_callback(lambda _: self._flush())
        if len(self.pipeline) >= self.limits.max_pipeline and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._arm(self.limits.keepalive_timeout_s)
        if not keep_alive:
            self._finish_after_pipeline()

    # -- responses -------------------------------------------------------------------
    def _flush(self) -> None:
        while self.pipeline and self.pipeline[0][0].done():
            future, keep_alive, head_only = self.pipeline.popleft()
            if future.cancelled() or self.transport is None or self.transport.is_closing():
                continue
            response = self.server.response(future)
            keep_alive = keep_alive and not response.close and not (
                self.closing and not self.pipeline)
            self.transport.write(encode_response(response, keep_alive, head_only))
            if not keep_alive:
                self._close()
                return
        if self.paused and len(self.pipeline) < self.limits.max_pipeline and not self.closing:
            self.paused = False
            if not self._write_paused:
                self.transport.resume_reading()

    def _fail(self, response: HttpResponse) -> None:
        """A broken request: answer after what is already queued, then close."""
        done: asyncio.Future[HttpResponse] = self.server.driver.loop.create_future()
        done.set_result(HttpResponse(response.status, response.body, response.headers, True))
        self.pipeline.append((done, False, False))
        self._linger = response.status == 413  # the rest of the request is still on its way
        self.closing = True
        self.transport.pause_reading()
        self._flush()

    def _finish_after_pipeline(self) -> None:
        self.closing = True
        self.transport.pause_reading()
        if not self.pipeline:
            self._close()

    def _close(self) -> None:
        self.closing = True
        self._cancel_timer()
        self.abort_pending()
        if self.transport is None or self.transport.is_closing():
            return
        if self._linger:
            self._start_linger()
            return
        self.transport.close()

    def _start_linger(self) -> None:
        """Closing now, with the refused request's body still arriving, would make the
        kernel reset the connection, and the client would see that instead of the 413.
        So (as nginx's lingering close) half-close our side after the response and read
        and discard what still comes, for at most ``linger_s`` and ``linger_bytes``."""
        self._linger = False
        self._drain_left = self.limits.linger_bytes
        if self.transport.can_write_eof():  # TLS cannot half-close: draining alone helps
            self.transport.write_eof()
        self.transport.resume_reading()
        self._timer = self.server.driver.loop.call_later(self.limits.linger_s,
                                                         self._end_linger)

    def _drain(self, size: int) -> None:
        self._drain_left -= size
        if self._drain_left <= 0:
            self._end_linger()

    def _end_linger(self) -> None:
        self._timer = None
        self._drain_left = None
        if self.transport is not None:
            self.transport.close()

    def abort_pending(self) -> None:
        for future, _, _ in self.pipeline:
            if isinstance(future, asyncio.Task):
                future.cancel()
        self.pipeline.clear()

    # -- timers ----------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        self._cancel_timer()
        self._timer = self.server.driver.loop.call_later(seconds, self._timed_out)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self.closing:
            return
        if self._in_request:  # slow client: the request did not arrive in time
            self._fail(error_response(RequestRefused(
                f"request not received within {self.limits.request_timeout_s:g} s",
                code="request_timeout")))
        elif self.pipeline:  # we are the slow side (a long poll): keep waiting
            self._arm(self.limits.keepalive_timeout_s)
        else:
            self._close()

    def _count_header_bytes(self, count: int) -> None:
        self.header_bytes += count
        if self.header_bytes > self.limits.max_header_bytes:
            raise _Abort(_too_large(f"request line and headers exceed "
                                    f"{self.limits.max_header_bytes} bytes"))


def _is_ui(target: str) -> bool:
    path = target.partition("?")[0]
    return path == "/ui" or path.startswith("/ui/")


def _too_large(message: str) -> HttpResponse:
    return error_response(RequestRefused(message, code="request_too_large"), close=True)


async def start_http_listener(driver: EngineDriver, config: HttpConfig,
                              protocol_limits: ProtocolLimits | None = None,
                              spare_connections: Callable[[], int] = lambda: 1 << 30) -> HttpServer:
    """Bind and serve on ``driver``; returns the server (``close()`` stops it).

    ``protocol_limits`` are the socket's value-domain and result/error bounds, shared so
    both transports refuse the same bodies; ``spare_connections`` says how many more
    executor connections the shared limit allows (worker sessions count against it).
    """
    api = HttpApi(config.limits.max_body_bytes, protocol_limits or ProtocolLimits())
    server = HttpServer(driver, api, config.limits, spare_connections)
    server.bound_port = await server.start(
        config.ip, config.port, tls_context(config) if config.tls else None)
    return server


async def start_ops_listener(driver: EngineDriver, admin: Any, port: int,
                             ip: str = "127.0.0.1") -> Callable[[], Any]:
    """``--metrics-port``: a plain loopback listener for /metrics, /healthz and /readyz only
    (for setups with the socket alone, or to keep scrapes off the API listener)."""
    limits = HttpLimits(max_body_bytes=65_536)
    server = HttpServer(driver, HttpApi(limits.max_body_bytes, ops_only=True), limits)
    server.admin = admin
    server.bound_port = await server.start(ip, port, None)
    admin.facts["metrics"] = lambda: {"address": f"http://{ip}:{server.bound_port}"}
    return server.close
