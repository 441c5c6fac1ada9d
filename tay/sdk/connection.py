"""One live Unix-socket connection to the engine: framing, correlation, writes.

A ``Link`` is the asyncio protocol of exactly one socket. Every received buffer is split
into all the frames it holds in one pass (no reader task, no read per frame); the frames
written during one turn of the event loop (and by the tasks a received buffer started)
leave in one ``write`` after them.
Requests are correlated by request id and never retried: when the socket goes, every
pending request fails with ``ConnectionLost`` (its outcome is unknown). One timer, armed
for the earliest deadline, times requests out (none per request). Messages the engine
initiates (``execute``, ``cancel_execution``, ``ping``) go to the ``on_message``
callback, which must not block.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from tay.errors import ConnectionLost, ProtocolError
import tay.sdk.wire as wire
from tay.sdk.wire import RequestIds, decode_payload, message_frame, report_frame, server_error

log = logging.getLogger("tay.sdk")

INBOUND_COMMANDS = frozenset({"execute", "cancel_execution", "ping"})
_EVENT_ACKS = frozenset({"accepted", "heartbeat_ok"})
_ERROR_TYPES = frozenset({"error", "protocol_error"})
# How tay serve frames the reply to an event; other spellings are decoded in full.
_ACCEPTED_HEAD = b'{"version":1,"type":"accepted","request_id":"'
_ACCEPTED_AT = len(_ACCEPTED_HEAD)
# How tay serve begins the reply to an enqueue (wire.enqueued_reply reads the rest).
_ENQUEUED_HEAD = b'{"version":1,"type":"enqueued","request_id":"'


class Link(asyncio.Protocol):
    """Requests and events over one connected socket."""

    def __init__(self, *, max_frame_bytes: int, on_message: Callable[[Link, dict[str, Any]], None]) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._on_message = on_message
        self.loop = asyncio.get_running_loop()  # (asyncio.get_running_loop() costs a getpid call)
        self._transport: asyncio.Transport | None = None
        self.request_id = RequestIds()
        # request id -> (future, deadline in loop time, message type, timeout, lean: see request)
        self._pending: dict[str, tuple[asyncio.Future[Any], float, str, float, bool]] = {}
        self._event_ids: set[str] = set()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at = 0.0
        self._partial = bytearray()  # the start of a frame that has not fully arrived
        self._outgoing: list[bytes] = []  # frames written this loop turn, sent by _flush
        self._flush_pending = False
        self._receiving = False
        self._replied = False  # a reply of this buffer resolved a request
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self.closed = asyncio.Event()  # set by close()
        self._shut = False  # the same as a plain bool: Event.is_set is a Python call
        self.close_reason: BaseException | None = None

    @property
    def is_open(self) -> bool:
        return not self._shut

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._shut:
            return
        if self._partial:
            self._partial += data
            if len(self._partial) < 4:
                return
            length = int.from_bytes(self._partial[:4], "big")
            if 0 < length <= self.max_frame_bytes and len(self._partial) < 4 + length:
                return  # not whole yet (a length out of bounds goes on to be refused now)
            data = bytes(self._partial)
            self._partial.clear()
        self._receiving = True  # what the frames make us write leaves in one flush, after them
        try:
            self._receive(data)
        except Exception as exc:  # noqa: BLE001 - any failure ends this link, never the process
            if isinstance(exc, ProtocolError):
                log.warning("dropping the connection to Tay: %s", exc)
            self.close(exc)
        finally:
            self._receiving = False
        # A reply wakes its caller in the next loop turn, and the caller usually sends its
        # next request then: the flush scheduled now runs right after those wake-ups, in
        # the same turn (one write, no extra turn of the loop just for it).
        if (self._outgoing or self._replied) and not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush)
        self._replied = False

    def _receive(self, data: bytes) -> None:
        """Dispatch every whole frame in ``data``; keep the rest for the next buffer."""
        at, end, limit = 0, len(data), self.max_frame_bytes
        while end - at >= 4:
            length = int.from_bytes(data[at : at + 4], "big")
            if length == 0 or length > limit:
                raise ProtocolError(f"Tay sent a frame of {length} bytes; allowed 1..{limit}")
            stop = at + 4 + length
            if stop > end:
                break
            if data.startswith(_ACCEPTED_HEAD, at + 4) and self._acknowledged(data[at + 4 + _ACCEPTED_AT : stop]):
                at = stop
                continue
            payload = data[at + 4 : stop]
            if payload.startswith(_ENQUEUED_HEAD) and self._enqueued(payload):
                at = stop
                continue
            self._dispatch(decode_payload(payload, max_frame_bytes=limit))
            if self._shut:
                return
            at = stop
        if at < end:
            self._partial += data[at:]

    def _acknowledged(self, tail: bytes) -> bool:
        """Swallow the ``accepted`` reply to one of our events without decoding it.

        ``tail`` follows ``{"version":1,"type":"accepted","request_id":"``; when it is one of
        our event ids, a quote and a brace, the frame is exactly that JSON object (our ids
        need no escaping). Anything else takes the full decoder.
        """
        if tail[-2:] != b'"}':
            return False
        try:
            request_id = tail[:-2].decode("ascii")
        except UnicodeDecodeError:
            return False
        if request_id not in self._event_ids:
            return False
        self._event_ids.discard(request_id)
        return True

    def _enqueued(self, payload: bytes) -> bool:
        """Answer a lean request (``Tay.enqueue``'s) from its ``enqueued`` reply without
        decoding it: ``(job_id, durability)``, all that ``enqueue`` returns of it.

        Only a reply that ``wire.enqueued_reply`` reads for sure (written as tay serve writes
        it, valid JSON that the decoder would read to the same values) and whose request is a
        pending lean one; anything else takes the full decoder and ``_dispatch``, as before.
        """
        read = wire.enqueued_reply(payload)
        if read is None:
            return False
        request_id, job_id, durability = read
        entry = self._pending.get(request_id)
        if entry is None or not entry[4]:
            return False
        del self._pending[request_id]
        future = entry[0]
        if not future.done():
            future.set_result((job_id, durability))
            self._replied = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(ConnectionLost("Tay closed the connection") if exc is None
                   else ConnectionLost(f"the connection to Tay failed: {exc}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- sending -----------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        if self._shut or self._transport is None or self._transport.is_closing():
            raise ConnectionLost("the connection to Tay is closed; the message was not sent")
        self._outgoing.append(frame)
        if not self._flush_pending and not self._receiving:
            self._flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if not self._outgoing:
            return
        frames, self._outgoing = self._outgoing, []
        if not self._shut and self._transport is not None:
            self._transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    async def _drain(self) -> None:
        """Wait while the socket pushes back (the transport paused our writes)."""
        while self._write_paused and not self._shut:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained  # resume_writing or close sets it
        if self._shut:
            raise ConnectionLost(f"writing to Tay failed: {self.close_reason}")

    def request(self, message_type: str, fields: Mapping[str, Any], *, timeout: float,
                plain: bool = False, lean: bool = False) -> asyncio.Future[Any]:
        """Send one request now; the future is its reply (an ``error`` reply raises
        ``ServerError``; no reply within ``timeout`` seconds raises ``ConnectionLost``).

        ``plain``: ``fields`` holds only plain JSON values already (see ``message_frame``).
        ``lean`` (an ``enqueue``): an ``enqueued`` reply that ``_enqueued`` reads gives
        ``(job_id, durability)`` instead of the decoded message; any other reply the message.
        Encoding errors raise here, before anything is sent.
        """
        request_id = self.request_id()
        frame = message_frame(message_type, request_id, fields, max_frame_bytes=self.max_frame_bytes, plain=plain)
        self._write(frame)
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        deadline = self.loop.time() + timeout
        self._pending[request_id] = (future, deadline, message_type, timeout, lean)
        if self._deadline_timer is None or deadline < self._deadline_at:
            self._arm_deadline(deadline)
        if self._write_paused:
            return asyncio.ensure_future(self._drained_reply(future))
        return future

    async def _drained_reply(self, reply: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        await self._drain()
        return await reply

    def _arm_deadline(self, deadline: float) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at = deadline
        self._deadline_timer = self.loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        """Fail every request past its deadline; re-arm for the earliest one left."""
        self._deadline_timer = None
        now = self.loop.time()
        earliest: float | None = None
        for request_id, (future, deadline, message_type, timeout, _) in list(self._pending.items()):
            if deadline <= now:
                del self._pending[request_id]
                if not future.done():
                    future.set_exception(ConnectionLost(
                        f"Tay did not answer {message_type!r} within {timeout:g}s; its outcome is unknown"))
            elif earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._arm_deadline(earliest)

    def send_event(self, message_type: str, fields: Mapping[str, Any]) -> None:
        """Send a fire-and-forget event now; its ``accepted`` reply is swallowed."""
        request_id = self.request_id()
        self._write(message_frame(message_type, request_id, fields, max_frame_bytes=self.max_frame_bytes))
        self._event_ids.add(request_id)

    def send_report(self, message_type: str, ids: tuple[bytes, bytes], result_json: bytes | None = None) -> None:
        """Send an execution report (``started``/``succeeded``) as an event, its ids
        (``wire.report_ids``) and result already encoded. Reports are bounded by the executor's capacity, so they do not
        wait for the socket to drain."""
        request_id = self.request_id()
        self._write(report_frame(message_type, request_id, ids, result_json, max_frame_bytes=self.max_frame_bytes))
        self._event_ids.add(request_id)

    # -- receiving ---------------------------------------------------------------------

    def _dispatch(self, message: dict[str, Any]) -> None:
        message_type = message["type"]
        if message_type in INBOUND_COMMANDS:
            self._on_message(self, message)
            return
        request_id = message["request_id"]
        entry = self._pending.pop(request_id, None)
        if entry is not None:
            future = entry[0]
            if future.done():
                return
            if message_type in _ERROR_TYPES:
                future.set_exception(server_error(message.get("error", message)))
            else:
                future.set_result(message)
            self._replied = True
            return
        if request_id in self._event_ids:
            self._event_ids.discard(request_id)
            if message_type not in _EVENT_ACKS:
                # A refused report (e.g. unknown_execution after a cancel) concerns one
                # execution only; it is no reason to drop every other one with the socket.
                log.info("Tay refused an execution report: %s", message.get("error", message))
            return
        raise ProtocolError(f"Tay sent an unexpected {message_type!r} message (request_id {request_id!r})")

    # -- closing -----------------------------------------------------------------------

    def close(self, reason: BaseException | None = None) -> None:
        """Close the socket and fail every pending request with ConnectionLost."""
        if self._shut:
            return
        self.close_reason = reason
        self._shut = True
        self.closed.set()
        detail = f": {reason}" if reason is not None else ""
        for future, *_ in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(f"the connection to Tay was lost{detail}; the outcome is unknown"))
        self._pending.clear()
        self._event_ids.clear()
        self._outgoing.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self.closed.wait()
