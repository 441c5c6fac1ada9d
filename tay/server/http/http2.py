"""HTTP/2 on the HTTP listener: ALPN ``h2`` over TLS, or prior-knowledge h2c on the
(loopback-only) plain listener, with the sans-IO ``h2`` library.

A connection starts as ``HttpConnection`` (HTTP/1.1) and becomes ``Http2Connection`` when
TLS negotiated ``h2`` or when its first bytes are the HTTP/2 preface. Every stream becomes
the same ``HttpRequest`` an HTTP/1.1 request does and goes through ``HttpServer.handle``,
so routes, bodies, limits, admission, long-poll claims and mTLS are one code path; this
module only frames. Bounds: concurrent streams (``h2_max_streams``, advertised and
enforced by h2), the header list (``max_header_bytes``, ``max_headers``), the body
(``max_body_bytes``: 413, then the rest of that body is read and dropped, at most
``linger_bytes`` / ``linger_s``, before the stream is reset with NO_ERROR as RFC 9113 §8.1
allows: clients such as httpx send the whole body before they read the response),
request bodies held at once per connection (twice ``max_body_bytes``: beyond it the
flow-control window is not reopened, so the peer waits), a stream must arrive whole within
``request_timeout_s`` of its headers, and a connection
without streams closes (GOAWAY) after ``keepalive_timeout_s``. Response bodies respect the
peer's flow-control windows; a peer that does not read stops being read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from tay.failures import RequestRefused
from tay.protocol.http_api import HttpRequest, HttpResponse, error_response

from ..peers import tcp_peer

log = logging.getLogger("tay.server.http")

_SETTINGS = h2.settings.SettingCodes


class _Stream:
    """A request being received: its headers, body so far and arrival deadline."""

    __slots__ = ("headers", "body", "timer", "unacknowledged")

    def __init__(self, headers: list[tuple[bytes, bytes]], timer: asyncio.TimerHandle) -> None:
        self.headers = headers
        self.body = bytearray()
        self.timer = timer
        self.unacknowledged = 0  # flow-controlled bytes whose window is not reopened yet


class StreamHost(Protocol):
    """What an HTTP/2 connection uses of the listener's ``HttpServer``, named here so that
    this module needs nothing of the listener's, which makes its connections."""

    driver: Any  # the EngineDriver
    limits: Any  # HttpLimits
    connections: set[Any]

    def handle(self, request: HttpRequest) -> "asyncio.Future[HttpResponse]": ...

    def response(self, future: "asyncio.Future[HttpResponse]") -> HttpResponse: ...


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection: h2's state machine, requests in flight and pending output."""

    def __init__(self, server: StreamHost) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = server.driver.loop
        self.transport: Any = None
        self.peer = ""  # tcp_peer(transport), for the operator's log
        self.closing = False
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_inbound_headers=True,
            validate_outbound_headers=False, normalize_outbound_headers=False))
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            _SETTINGS.MAX_CONCURRENT_STREAMS: self.limits.h2_max_streams,
            _SETTINGS.MAX_HEADER_LIST_SIZE: self.limits.max_header_bytes,
        })
        self.h2.decoder.max_header_list_size = self.limits.max_header_bytes
        self.receiving: dict[int, _Stream] = {}
        self.answering: dict[int, asyncio.Future[HttpResponse]] = {}
        self.unsent: dict[int, memoryview] = {}  # response bodies waiting for window
        self.discarding: dict[int, list] = {}  # refused bodies still arriving: [left, timer]
        self._idle: asyncio.TimerHandle | None = None
        self._write_paused = False
        self.buffered = 0  # request body bytes held by ``receiving``
        self.buffer_budget = 2 * self.limits.max_body_bytes

    # -- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.peer = tcp_peer(transport)
        self.server.connections.add(self)
        self.h2.initiate_connection()
        self._send()
        self._check_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        if self._idle is not None:
            self._idle.cancel()
        self.abort_pending()

    def pause_writing(self) -> None:
        """The peer does not read: stop reading its requests until it does."""
        self._write_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self.closing:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:  # h2 queued a GOAWAY naming the error
            log.debug("HTTP/2 protocol error: %s", error)
            self._send()
            self._close()
            return
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)
        self._send()
        self._check_idle()

    # -- h2 events -------------------------------------------------------------------
    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        headers = event.headers
        if len(headers) > self.limits.max_headers:
            self._refuse(stream_id, f"more than {self.limits.max_headers} headers",
                         "request_too_large")
            return
        for name, value in headers:
            if name == b"content-length" and value.isdigit() \
                    and int(value) > self.limits.max_body_bytes:
                self._refuse(stream_id, f"body of {int(value)} bytes exceeds "
                                        f"{self.limits.max_body_bytes}", "request_too_large")
                return
        timer = self.loop.call_later(self.limits.request_timeout_s, self._overdue, stream_id)
        self.receiving[stream_id] = _Stream(headers, timer)

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        stream = self.receiving.get(stream_id)
        if stream is not None and self.buffered + len(event.data) > self.buffer_budget:
            stream.unacknowledged += event.flow_controlled_length  # the peer waits
        else:
            self._acknowledge(stream_id, event.flow_controlled_length)
        if stream is None:
            discard = self.discarding.get(stream_id)
            if discard is not None:
                discard[0] -= len(event.data)
                if discard[0] < 0:
                    self._stop_discarding(stream_id)
            return
        stream.body += event.data
        self.buffered += len(event.data)
        if len(stream.body) > self.limits.max_body_bytes:
            self._refuse(stream_id, f"body exceeds {self.limits.max_body_bytes} bytes",
                         "request_too_large")

    def _on_end(self, event: h2.events.StreamEnded) -> None:
        discard = self.discarding.pop(event.stream_id, None)
        if discard is not None:
            discard[1].cancel()
        stream = self._release(event.stream_id)
        if stream is not None:
            self._dispatch(event.stream_id, stream)

    def _on_reset(self, event: h2.events.StreamReset) -> None:
        self._forget(event.stream_id)

    def _on_window(self, event: h2.events.WindowUpdated | h2.events.RemoteSettingsChanged) -> None:
        for stream_id in list(self.unsent):
            self._send_body(stream_id, self.unsent.pop(stream_id))

    def _on_terminated(self, event: h2.events.ConnectionTerminated) -> None:
        self._close()

    # -- requests and responses ------------------------------------------------------
    def _dispatch(self, stream_id: int, stream: _Stream) -> None:
        pseudo: dict[bytes, bytes] = {}
        headers: list[tuple[bytes, bytes]] = []
        for name, value in stream.headers:
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                headers.append((name, value))
        authority = pseudo.get(b":authority")
        if authority is not None and not any(name == b"host" for name, _ in headers):
            headers.append((b"host", authority))
        method = pseudo.get(b":method", b"").decode("ascii", "replace")
        request = HttpRequest(method, pseudo.get(b":path", b"").decode("latin-1"),
                              tuple(headers), bytes(stream.body), "2", self.peer)
        try:
            future = self.server.handle(request)
        except Exception as error:  # a router bug must not take the connection down silently
            log.error("HTTP router failed", exc_info=error)
            future = self.loop.create_future()
            future.set_result(error_response(RequestRefused("internal server error",
                                                            code="internal")))
        self.answering[stream_id] = future
        head_only = method == "HEAD"
        future.add_done_callback(lambda done: self._respond(stream_id, done, head_only))

    def _respond(self, stream_id: int, future: "asyncio.Future[HttpResponse]",
                 head_only: bool) -> None:
        if self.answering.pop(stream_id, None) is None or future.cancelled() or self.closing:
            return
        self._send_response(stream_id, self.server.response(future), head_only)
        self._send()
        self._check_idle()

    def _send_response(self, stream_id: int, response: HttpResponse, head_only: bool) -> None:
        headers = [(b":status", b"%d" % response.status), *response.headers]
        if response.status != 204:
            headers.append((b"content-length", b"%d" % len(response.body)))
        body = b"" if head_only else response.body
        try:
            self.h2.send_headers(stream_id, headers, end_stream=not body)
        except h2.exceptions.ProtocolError:  # the peer reset the stream meanwhile
            return
        if body:
            self._send_body(stream_id, memoryview(body))

    def _send_body(self, stream_id: int, body: memoryview) -> None:
        """Send what the flow-control windows allow; keep the rest until they reopen."""
        try:
            while body:
                size = min(len(body), self.h2.local_flow_control_window(stream_id),
                           self.h2.max_outbound_frame_size)
                if size <= 0:
                    self.unsent[stream_id] = body
                    return
                self.h2.send_data(stream_id, body[:size], end_stream=size == len(body))
                body = body[size:]
        except h2.exceptions.ProtocolError:  # reset or closed meanwhile
            self.unsent.pop(stream_id, None)

    def _acknowledge(self, stream_id: int, size: int) -> None:
        """Reopen the flow-control windows for ``size`` bytes the peer sent on the stream."""
        if size > 0:  # h2 reopens the connection window even when the stream is gone
            self.h2.acknowledge_received_data(size, stream_id)

    def _release(self, stream_id: int) -> _Stream | None:
        """Stop receiving ``stream_id``: its body no longer counts against the budget, and
        streams the budget held back get their windows reopened."""
        stream = self.receiving.pop(stream_id, None)
        if stream is None:
            return None
        stream.timer.cancel()
        self.buffered -= len(stream.body)
        self._acknowledge(stream_id, stream.unacknowledged)
        for waiting_id, waiting in self.receiving.items():
            if waiting.unacknowledged and self.buffered < self.buffer_budget:
                self._acknowledge(waiting_id, waiting.unacknowledged)
                waiting.unacknowledged = 0
        return stream

    def _refuse(self, stream_id: int, message: str, code: str) -> None:
        """Answer a request that cannot be served (too large, too slow) before it is
        complete. A too-large body may still be on its way: it is read and dropped within
        the linger bounds, then the stream is reset; a too-slow one is reset at once."""
        self._release(stream_id)
        self._send_response(stream_id, error_response(RequestRefused(message, code=code)),
                            False)
        if code == "request_too_large" and self.h2.streams.get(stream_id) is not None \
                and not self.h2.streams[stream_id].closed:
            timer = self.loop.call_later(self.limits.linger_s, self._stop_discarding, stream_id)
            self.discarding[stream_id] = [self.limits.linger_bytes, timer]
            return
        self._reset(stream_id)

    def _stop_discarding(self, stream_id: int) -> None:
        discard = self.discarding.pop(stream_id, None)
        if discard is not None:
            discard[1].cancel()
            self._reset(stream_id)
            self._send()
            self._check_idle()

    def _reset(self, stream_id: int) -> None:
        """RST_STREAM NO_ERROR: stop sending this request (the response is complete)."""
        if stream_id in self.unsent:
            return  # reset only once the whole response went out
        try:
            self.h2.reset_stream(stream_id, ErrorCodes.NO_ERROR)
        except h2.exceptions.ProtocolError:
            pass

    def _overdue(self, stream_id: int) -> None:
        if stream_id in self.receiving and not self.closing:
            self._refuse(stream_id, f"request not received within "
                                    f"{self.limits.request_timeout_s:g} s", "request_timeout")
            self._send()
            self._check_idle()

    def _forget(self, stream_id: int) -> None:
        self._release(stream_id)
        discard = self.discarding.pop(stream_id, None)
        if discard is not None:
            discard[1].cancel()
        self.unsent.pop(stream_id, None)
        future = self.answering.pop(stream_id, None)
        if isinstance(future, asyncio.Task):
            future.cancel()  # e.g. a long-poll claim the client gave up on

    # -- connection ------------------------------------------------------------------
    def _send(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _check_idle(self) -> None:
        """No stream open and nothing owed: the keep-alive clock runs."""
        busy = self.receiving or self.answering or self.unsent or self.discarding
        if busy or self.closing:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
        elif self._idle is None:
            self._idle = self.loop.call_later(self.limits.keepalive_timeout_s, self.shutdown)

    def shutdown(self) -> None:
        """Say goodbye (GOAWAY) and close; requests in flight are abandoned."""
        if self.closing or self.transport is None:
            return
        self.abort_pending()
        try:
            self.h2.close_connection()
        except h2.exceptions.ProtocolError:
            pass
        self._send()
        self._close()

    def _close(self) -> None:
        self.closing = True
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self.transport is not None:
            self.transport.close()

    def abort_pending(self) -> None:
        for stream_id in [*self.receiving, *self.answering, *self.discarding]:
            self._forget(stream_id)


_HANDLERS = {
    h2.events.RequestReceived: Http2Connection._on_request,
    h2.events.DataReceived: Http2Connection._on_data,
    h2.events.StreamEnded: Http2Connection._on_end,
    h2.events.StreamReset: Http2Connection._on_reset,
    h2.events.WindowUpdated: Http2Connection._on_window,
    h2.events.RemoteSettingsChanged: Http2Connection._on_window,
    h2.events.ConnectionTerminated: Http2Connection._on_terminated,
}
