"""One live Unix-socket connection to the engine: framing, correlation, the read loop.

A ``Link`` lives exactly as long as its socket. Requests are correlated by request id and
never retried: when the socket goes, every pending request fails with ``ConnectionLost``
(its outcome is unknown). Messages the engine initiates (``execute``,
``cancel_execution``, ``ping``) go to the ``on_message`` callback, which must not block.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any

from tay.errors import ConnectionLost, ProtocolError
from tay.sdk.wire import decode_payload, encode_frame, envelope, new_request_id, server_error

log = logging.getLogger("tay.sdk")

INBOUND_COMMANDS = frozenset({"execute", "cancel_execution", "ping"})
_EVENT_ACKS = frozenset({"accepted", "heartbeat_ok"})
_ERROR_TYPES = frozenset({"error", "protocol_error"})


def _time_out(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class Link:
    """Requests and events over one connected socket."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int,
        on_message: Callable[[Link, dict[str, Any]], None],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.max_frame_bytes = max_frame_bytes
        self._on_message = on_message
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._event_ids: set[str] = set()
        self.closed = asyncio.Event()
        self.close_reason: BaseException | None = None
        self._read_task = asyncio.create_task(self._read_loop(), name="tay-reader")

    @property
    def is_open(self) -> bool:
        return not self.closed.is_set()

    # -- sending -----------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        """``message`` is an ``envelope`` result (normalized already)."""
        if self.closed.is_set() or self._writer.is_closing():
            raise ConnectionLost("the connection to Tay is closed; the message was not sent")
        self._writer.write(encode_frame(message, max_frame_bytes=self.max_frame_bytes,
                                        normalized=True))

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.close(exc)
            raise ConnectionLost(f"writing to Tay failed: {exc}") from exc

    async def request(self, message_type: str, fields: Mapping[str, Any], *, timeout: float) -> dict[str, Any]:
        """Send one request and wait for its reply; an ``error`` reply raises ServerError."""
        request_id = new_request_id()
        message = envelope(message_type, request_id, fields)  # validation errors raise here
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[request_id] = future
        # one timer handle instead of wait_for + shield (a task and two futures per request)
        timer = loop.call_later(timeout, _time_out, future)
        try:
            self._write(message)
            if self._writer.transport.get_write_buffer_size():
                await self._drain()  # only when the socket pushes back
            return await future
        except TimeoutError as exc:
            raise ConnectionLost(
                f"Tay did not answer {message_type!r} within {timeout:g}s; its outcome is unknown"
            ) from exc
        finally:
            timer.cancel()
            self._pending.pop(request_id, None)

    async def send_event(self, message_type: str, fields: Mapping[str, Any]) -> None:
        """Send a fire-and-forget event; its ``accepted`` reply is swallowed."""
        request_id = new_request_id()
        message = envelope(message_type, request_id, fields)
        self._event_ids.add(request_id)
        try:
            self._write(message)
            if self._writer.transport.get_write_buffer_size():
                await self._drain()  # only when the socket pushes back
        except BaseException:
            self._event_ids.discard(request_id)
            raise

    # -- receiving ---------------------------------------------------------------------

    async def _read_frame(self) -> dict[str, Any]:
        header = await self._reader.readexactly(4)
        (length,) = struct.unpack(">I", header)
        if length == 0 or length > self.max_frame_bytes:
            raise ProtocolError(f"Tay sent a frame of {length} bytes; allowed 1..{self.max_frame_bytes}")
        return decode_payload(await self._reader.readexactly(length), max_frame_bytes=self.max_frame_bytes)

    async def _read_loop(self) -> None:
        reason: BaseException | None = None
        try:
            while True:
                self._dispatch(await self._read_frame())
        except asyncio.CancelledError:
            reason = ConnectionLost("the Tay client was closed")
        except asyncio.IncompleteReadError:
            reason = ConnectionLost("Tay closed the connection")
        except Exception as exc:  # noqa: BLE001 - any failure ends this link, never the process
            reason = exc
            if isinstance(exc, ProtocolError):
                log.warning("dropping the connection to Tay: %s", exc)
        finally:
            self.close(reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        message_type = message["type"]
        if message_type in INBOUND_COMMANDS:
            self._on_message(self, message)
            return
        request_id = message["request_id"]
        future = self._pending.pop(request_id, None)
        if future is not None:
            if future.done():
                return
            if message_type in _ERROR_TYPES:
                future.set_exception(server_error(message.get("error", message)))
            else:
                future.set_result(message)
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
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        detail = f": {reason}" if reason is not None else ""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(f"the connection to Tay was lost{detail}; the outcome is unknown"))
        self._pending.clear()
        self._event_ids.clear()
        self._writer.close()
        if asyncio.current_task() is not self._read_task:
            self._read_task.cancel()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self._read_task
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
