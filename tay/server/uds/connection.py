"""One accepted Unix-socket connection: an asyncio protocol around ``ProtocolSession``.

State by lifetime: the listener (``Listener``: limits, driver, live connections) outlives
connections; the session (protocol state) lives as long as the socket; a forwarded request
lives until its reply is written. Backpressure: when the transport's write buffer passes
the high-water mark we stop reading, so a peer that does not read cannot make us queue
replies without bound (its requests stop arriving, and pending requests are capped).

Two deadlines keep idle sockets from holding connection slots: ``hello`` must arrive within
``hello_timeout_ms`` of connecting, and a frame must complete within ``frame_timeout_ms`` of
its first byte (not counting time the server itself stopped reading). Either closes the
connection with an uncorrelated ``hello_timeout`` / ``frame_timeout``. The frame clock
costs a look at the decoder's buffer per read and a timer only while a frame is partial.

Every forwarded request has a deadline (``ProtocolLimits.request_timeout_ms``, 30 s by
default), kept by one ``RequestDeadlines`` per connection (one loop timer, not one per
request). On expiry the client gets ``request_timeout`` and its pending slot is freed; the
real answer, if the engine still produces one, is dropped. Answers and deadlines for one
``request_id`` are matched first-in first-out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from tay.engine import commands as engine_commands
from tay.engine.effects import Effect, Execute, Refuse, Reply
from tay.failures import ConnectionFatal, RequestRefused
from tay.protocol import requests as wire
from tay.protocol.limits import ProtocolLimits
from tay.protocol.replies import (error_frame, execute_frame_into, message_frame,
                                  message_frame_into)
from tay.protocol.session import ProtocolSession

from ..peers import unix_peer
from .deadlines import RequestDeadlines

log = logging.getLogger("tay.server")
# execution reports: the session builds them as engine commands (see ProtocolSession)
_REPORTS = (engine_commands.Started, engine_commands.Succeeded, engine_commands.Failed)
_ENQUEUE = engine_commands.DecodedEnqueue  # its args come from orjson.loads (session.py)
_PLAIN_ENQUEUE = engine_commands.PlainEnqueue  # and its options from the frame scan
_new_tuple = tuple.__new__  # an engine command built without its Python-level __new__

WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 1 << 18


class ConnectionHost(Protocol):
    """What a connection uses of the listener that accepted it (``Listener``), named here
    so that this module needs nothing of the listener's, which makes connections."""

    driver: Any  # the EngineDriver
    limits: ProtocolLimits
    admin: Any  # the AdminService, or None

    def admit(self, connection: "Connection") -> bool: ...

    def greeted(self, connection: "Connection") -> None: ...

    def release(self, connection: "Connection") -> None: ...


class Connection(asyncio.Protocol):
    """Protocol state of one socket; engine commands go through the shared driver."""

    def __init__(self, listener: ConnectionHost) -> None:
        self.listener = listener
        self._driver = listener.driver
        self.session = ProtocolSession(listener.limits, report_makers(self),
                                       self._enqueue_command,
                                       report_tuples=(_REPORTS[0], _REPORTS[1], (self,)),
                                       plain_enqueue=self._plain_enqueue_command)
        self.transport: asyncio.Transport | None = None
        self.connected_engine = False
        self._deadlines: RequestDeadlines | None = None  # made with the loop, on connect
        self._timed_out: Counter[str] = Counter()
        self._timeout_s = listener.limits.request_timeout_ms / 1000.0
        self._reading_paused_for_writes = False
        # the frames of this release or loop turn, as pieces (a frame may be several), joined
        # and written in one call
        self._outgoing: list[bytes] = []
        self._hello_timer: asyncio.TimerHandle | None = None
        self._frame_timer: asyncio.TimerHandle | None = None
        self._partial_since: float | None = None  # loop time the unfinished frame began
        self._unread = self.session.unread  # the decoder's partial frame, tested per read

    # -- asyncio callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        self._deadlines = RequestDeadlines(self._loop, self._timeout_s, self._expire)
        # what deliver() calls when it queues the first frame of a release: the driver's
        # list of connections to write once the release is done, else a loop callback
        dirty = getattr(self._driver, "dirty", None)
        self._queued = dirty.append if dirty is not None else self._flush_soon
        # a reply whose id has no deadline (the "accepted" of every report) skips answer()
        self._waiting = self._deadlines.waiting
        if not self.listener.admit(self):
            transport.close()  # over executor_max_connections: accept, then close
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        self.listener.driver.attach(self, self.deliver)
        self._hello_timer = self._loop.call_later(
            self.listener.limits.hello_timeout_ms / 1000.0, self._hello_overdue)

    def data_received(self, data: bytes) -> None:
        outputs: list = []
        close_frame = self.session.receive_into(data, outputs)
        driver = self._driver
        for output in outputs:
            kind = type(output)
            if kind is bytes:
                self._write(output)
            elif kind in _REPORTS:  # an engine command already
                driver.submit(output)
            elif kind is tuple:  # an engine Enqueue and its size (_enqueue_command)
                command, size = output
                self._deadlines.add(command[1])  # its request_id
                driver.submit(command, size)  # client admission: a permit
            else:
                self._forward(output)
        if close_frame is not None:
            self._write(close_frame)
            self.flush()
            self.transport.close()
            return
        if self._unread:  # a frame is partial: its clock runs from its first byte
            if outputs or self._partial_since is None:
                self._partial_since = self._loop.time()
                if self._frame_timer is None:
                    self._frame_timer = self._loop.call_later(
                        self.listener.limits.frame_timeout_ms / 1000.0, self._frame_overdue)
        else:
            self._partial_since = None

    def pause_writing(self) -> None:
        self._reading_paused_for_writes = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._reading_paused_for_writes = False
        if self._partial_since is not None:
            self._partial_since = self._loop.time()  # the pause was ours, not the peer's
        if not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._outgoing.clear()
        for timer in (self._hello_timer, self._frame_timer):
            if timer is not None:
                timer.cancel()
        if self._deadlines is not None:
            self._deadlines.close()
        self.listener.release(self)
        if self.connected_engine:
            self.listener.driver.submit(engine_commands.Disconnect(self))
        self.listener.driver.detach(self)

    # -- engine side -------------------------------------------------------------------
    def deliver(self, effect: Effect) -> None:
        """Queue the frame of one released effect; correlated replies free their pending
        slot. The driver writes what its release queued (``EngineDriver.dirty``); a caller
        outside a release must ``flush`` after.

        Execution reports are answered as the engine decided: ``accepted`` for a late
        report of an execution this connection really ran (settled since), and
        ``unknown_execution`` for ids it was never given."""
        kind = type(effect)
        outgoing = self._outgoing  # the per-job effects first, queued as _write does
        if kind is Execute:  # framed without a message dict
            if not outgoing:
                self._queued(self)
            execute_frame_into(outgoing, effect)
            return
        if kind is Reply:  # one unpack, not three named-field reads
            _, request_id, message_type, fields = effect
            if request_id is not None:
                if self._timed_out and self._timed_out[request_id]:
                    self._drop_late_answer(request_id)
                    return
                if request_id in self._waiting and self._deadlines.answer(request_id):
                    self.session.pending -= 1  # session.settle(), without its call
            if not outgoing:
                self._queued(self)
            message_frame_into(outgoing, message_type, request_id, fields)
            return
        request_id = getattr(effect, "request_id", None)
        if isinstance(effect, (Reply, Refuse)) and request_id is not None:
            if self._timed_out and self._timed_out[request_id]:
                self._drop_late_answer(request_id)
                return
            if self._deadlines.answer(request_id):
                self.session.settle()
        if isinstance(effect, Refuse):
            frame = error_frame(effect.failure, request_id)
        else:
            message = effect.message()
            frame = message_frame(message.pop("type"), message.pop("request_id", None),
                                  message)
        if not outgoing:
            self._queued(self)
        outgoing.append(frame)

    # -- deadlines -----------------------------------------------------------------------
    def close_fatal(self, message: str, code: str) -> None:
        """Send one uncorrelated error, then close (no more input is processed)."""
        self.session.failed = True
        if self.transport is None or self.transport.is_closing():
            return
        self._write(error_frame(ConnectionFatal(message, code=code)))
        self.flush()
        self.transport.close()

    def _hello_overdue(self) -> None:
        self._hello_timer = None
        if self.session.hello is None:
            self.close_fatal(f"no hello within {self.listener.limits.hello_timeout_ms} ms of "
                             "connecting", "hello_timeout")

    def _frame_overdue(self) -> None:
        self._frame_timer = None
        since = self._partial_since
        if since is None or self.session.failed:
            return
        timeout_s = self.listener.limits.frame_timeout_ms / 1000.0
        now = self._loop.time()
        if self._reading_paused_for_writes:  # we are not reading: not the peer's delay
            self._partial_since = since = now
        if now - since < timeout_s:
            self._frame_timer = self._loop.call_later(since + timeout_s - now,
                                                      self._frame_overdue)
            return
        self.close_fatal(f"a frame was not completed within "
                         f"{self.listener.limits.frame_timeout_ms} ms of its first byte",
                         "frame_timeout")

    def _drop_late_answer(self, request_id: str) -> None:
        self._timed_out[request_id] -= 1
        if not self._timed_out[request_id]:
            del self._timed_out[request_id]

    def _expire(self, request_id: str) -> None:
        """The oldest pending request with this id ran out of time: answer it ourselves."""
        self._timed_out[request_id] += 1
        self.session.settle()
        failure = RequestRefused(
            f"no answer within {self.listener.limits.request_timeout_ms} ms; the outcome is "
            "unknown", code="request_timeout")
        self._write(error_frame(failure, request_id))

    def _enqueue_command(self, request_id: str, task: str, args: dict, options: dict,
                         size: int) -> tuple[engine_commands.Enqueue, int]:
        """What the session makes of an enqueue: the engine command, and the request's size
        in bytes for client admission (a permit per enqueue in flight)."""
        return _new_tuple(_ENQUEUE, (self, request_id, task, args, options)), size

    def _plain_enqueue_command(self, request_id: str, task: str, args: dict,
                               plain: tuple, size: int) -> tuple[engine_commands.Enqueue, int]:
        """``_enqueue_command`` of options the frame scan read already: ``(retries, queue,
        durability)``, the engine's ``PlainEnqueue``."""
        return _new_tuple(_PLAIN_ENQUEUE, (self, request_id, task, args, plain)), size

    def _forward(self, request: wire.Request) -> None:
        if isinstance(request, wire.FORWARDED):
            self._deadlines.add(request.request_id)
        if isinstance(request, wire.AdminRequest):
            self._admin(request)
            return
        command = to_engine_command(self, request)
        if isinstance(request, wire.Hello):
            self.connected_engine = True
            self.listener.greeted(self)
            if self._hello_timer is not None:
                self._hello_timer.cancel()
                self._hello_timer = None
        if isinstance(command, UnsupportedRequest):
            failure = RequestRefused(f"{command.kind} is not supported by this engine",
                                     code="unsupported_request")
            self.listener.driver.answer([Refuse(self, command.request_id, failure)])
            return
        if type(request) is wire.Enqueue:  # client admission: a permit per enqueue in flight
            self.listener.driver.submit(command, request.size)
            return
        self.listener.driver.submit(command)

    def _admin(self, request: wire.AdminRequest) -> None:
        """Operations requests go through the admin service; its answer comes back here."""
        admin = self.listener.admin
        if admin is None:
            failure = RequestRefused("the operations API is not running", code="unavailable")
            self.listener.driver.answer([Refuse(self, request.request_id, failure)])
            return
        task = self._loop.create_task(admin.call(request.op, request.body,
                                                 f"socket {unix_peer(self.transport)}"))

        def answered(done: "asyncio.Task[Reply | Refuse]") -> None:
            if done.cancelled() or self.transport is None or self.transport.is_closing():
                return
            effect = done.result()
            if isinstance(effect, Reply):
                self.deliver(Reply(self, request.request_id, effect.type, effect.fields))
            else:
                self.deliver(Refuse(self, request.request_id, effect.failure))
            self.flush()  # not a driver release: nothing else writes it

        task.add_done_callback(answered)

    def _write(self, frame: bytes) -> None:
        """Queue ``frame``; everything queued in this loop turn leaves in one write."""
        if not self._outgoing:
            self._loop.call_soon(self.flush)
        self._outgoing.append(frame)

    def _flush_soon(self, conn: "Connection") -> None:
        self._loop.call_soon(conn.flush)

    def flush(self) -> None:
        """Hand the frames queued so far to the transport (also before closing it)."""
        outgoing = self._outgoing
        if not outgoing:
            return
        data = outgoing[0] if len(outgoing) == 1 else b"".join(outgoing)
        outgoing.clear()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


def report_makers(conn: object) -> tuple[Callable[..., Any], ...]:
    """What the session builds the started, succeeded and failed reports of ``conn`` with:
    the engine commands, each a tuple made at once (a Python call, not the class's call
    and its Python-level ``__new__``)."""
    started, succeeded, failed = _REPORTS
    return (
        lambda request_id, reservation_id, execution_id:
            _new_tuple(started, (conn, request_id, reservation_id, execution_id)),
        lambda request_id, reservation_id, execution_id, result:
            _new_tuple(succeeded, (conn, request_id, reservation_id, execution_id, result)),
        lambda request_id, reservation_id, execution_id, error:
            _new_tuple(failed, (conn, request_id, reservation_id, execution_id, error)),
    )


def to_engine_command(conn: object, request: wire.Request) -> object:
    """Map a typed wire request to the engine command it stands for."""
    c = engine_commands
    match request:
        case wire.Hello():
            return c.Connect(conn, request.mode, request.runtime_id, request.max_concurrency,
                             request_id=request.request_id)
        case wire.RegisterTasks():
            return c.RegisterTasks(conn, request.tasks, request.request_id)
        case wire.UnregisterTasks():
            return c.UnregisterTasks(conn, request.tasks, request.request_id)
        case wire.Enqueue():  # its args come from orjson.loads too (the session's decode)
            return c.DecodedEnqueue(conn, request.request_id, request.task, request.args,
                                    request.options)
        case wire.JobRead(kind="status"):
            return c.Status(conn, request.request_id, request.job_id)
        case wire.JobRead(kind="result"):
            return c.Result(conn, request.request_id, request.job_id)
        case wire.JobRead(kind="cancel"):
            return c.Cancel(conn, request.request_id, request.job_id)
        case wire.Started():
            return c.Started(conn, request.request_id, request.reservation_id, request.execution_id)
        case wire.Succeeded():
            return c.Succeeded(conn, request.request_id, request.reservation_id,
                               request.execution_id, request.result)
        case wire.Failed():
            return c.Failed(conn, request.request_id, request.reservation_id,
                            request.execution_id, request.error)
        case wire.ScheduleRequest():
            return schedule_command(conn, request)
    raise TypeError(f"no engine command for {type(request).__name__}")


def schedule_command(conn: object, request: wire.ScheduleRequest) -> object:
    """Schedule commands come from the schedules work in the engine, when it provides them."""
    names = {"schedule": "Schedule", "cancel_schedule": "CancelSchedule",
             "schedules": "ListSchedules", "schedule_status": "ScheduleStatus"}
    command_class = getattr(engine_commands, names[request.kind], None)
    if command_class is None:
        return UnsupportedRequest(conn, request.request_id, request.kind)
    return command_class(conn, request.request_id, request.body)


class UnsupportedRequest:
    """A request the engine has no command for yet; the listener answers it directly."""

    def __init__(self, conn: object, request_id: str, kind: str) -> None:
        self.conn = conn
        self.request_id = request_id
        self.kind = kind
