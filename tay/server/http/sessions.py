"""HTTP worker sessions and the engine port HTTP requests go through.

A worker session is an engine connection in ``worker`` mode bound to one queue
(``Connect(queue=...)``): the driver delivers its ``execute`` / ``cancel_execution``
effects into a bounded buffer (capacity*2+4) that long-poll claims drain. A session ends
on ``DELETE /workers``, on buffer overflow, or 60 s after its last claim; the engine then
sees a ``Disconnect`` and settles in-flight work as interrupted.

Tokens are secrets: 32 random bytes, base64url without padding. The registry is keyed by
the SHA-256 of the token and the stored token is compared with ``hmac.compare_digest``;
a token never appears in logs or reprs.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
from collections import deque
from collections.abc import Callable
from typing import Any

from tay.engine import commands as engine
from tay.engine.effects import CancelExecution, Effect, Execute, Refuse, Reply
from tay.failures import RequestRefused
from tay.protocol.http_api import (
    NO_CONTENT, HttpResponse, RegisterWorker, WorkerCall, effect_response, error_response,
    event_response, json_response,
)
from tay.protocol.requests import Failed, Succeeded

from ..driver import EngineDriver
from ..engine_port import EnginePort
from .config import CLAIM_WAIT_S, SESSION_IDLE_S

log = logging.getLogger("tay.server.http")

def new_token() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


class WorkerSession(EnginePort):
    """One registered HTTP worker: its queue, event buffer, waiting claim and idle timer."""

    def __init__(self, driver: EngineDriver, registration: RegisterWorker, token: str) -> None:
        super().__init__(driver, "w")
        self._token = token.encode("ascii")  # kept only for compare_digest
        self.digest = _digest(token)
        self.queue = registration.queue
        self.runtime_id = registration.runtime_id
        self.buffer_limit = registration.capacity * 2 + 4
        self.buffer: deque[dict[str, Any]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.idle_handle: asyncio.TimerHandle | None = None
        self.ended = False
        self.on_overflow: Callable[[WorkerSession], None] | None = None
        self.on_event = self._buffer_event

    def matches(self, token: str) -> bool:
        return hmac.compare_digest(self._token, token.encode("ascii"))

    def _buffer_event(self, effect: Effect) -> None:
        if not isinstance(effect, (Execute, CancelExecution)) or self.ended:
            return
        if len(self.buffer) >= self.buffer_limit:
            if self.on_overflow is not None:
                self.on_overflow(self)
            return
        self.buffer.append(effect.message())
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def __repr__(self) -> str:  # never the token
        return f"<WorkerSession runtime_id={self.runtime_id!r} queue={self.queue!r}>"


class SessionRegistry:
    """Live HTTP worker sessions of one listener."""

    def __init__(self, driver: EngineDriver, *, max_sessions: Callable[[], int],
                 max_body_bytes: int, claim_wait_s: float = CLAIM_WAIT_S,
                 idle_s: float = SESSION_IDLE_S) -> None:
        self.driver = driver
        self.max_sessions = max_sessions  # how many more sessions the connection limit allows
        self.max_body_bytes = max_body_bytes
        self.claim_wait_s = claim_wait_s
        self.idle_s = idle_s
        self.sessions: dict[bytes, WorkerSession] = {}
        driver.add_stop_listener(self._wake_claims)

    def __len__(self) -> int:
        return len(self.sessions)

    async def register(self, registration: RegisterWorker) -> HttpResponse:
        if self.max_sessions() <= 0:
            return error_response(RequestRefused("the connection limit is reached",
                                                 code="invalid_worker", reason="connection_limit"))
        token = new_token()
        session = WorkerSession(self.driver, registration, token)
        session.on_overflow = lambda s: self.end(s, "buffer overflow")
        connected = session.request(lambda rid: engine.Connect(
            session, "worker", registration.runtime_id, registration.capacity,
            queue=registration.queue, request_id=rid))
        registered = session.request(
            lambda rid: engine.RegisterTasks(session, registration.tasks, rid))
        for reply in (await connected, await registered):
            if isinstance(reply, Refuse):
                self.end(session, "registration refused")
                failure = reply.failure
                if failure.code in ("unavailable", "unknown_outcome"):
                    return error_response(failure)  # the engine cannot serve: 503, not 400
                return error_response(RequestRefused(failure.message, code="invalid_worker",
                                                     reason=failure.code))
        self.sessions[session.digest] = session
        self._touch(session)
        log.info("HTTP worker %s registered on queue %r", registration.runtime_id,
                 registration.queue)
        return json_response(201, {"worker_token": token}, self.max_body_bytes)

    def lookup(self, token: str) -> WorkerSession:
        session = self.sessions.get(_digest(token))
        if session is None or not session.matches(token):
            raise RequestRefused("the worker token is not registered", code="unknown_worker")
        return session

    async def handle(self, call: WorkerCall) -> HttpResponse:
        try:
            session = self.lookup(call.token)
            if call.kind == "claim":
                return await self._claim(session, call.queue)
            if call.kind == "close":
                self.end(session, "closed by the worker")
                return json_response(200, {"type": "closed"}, self.max_body_bytes)
            return await self._report(session, call)
        except RequestRefused as refused:
            return error_response(refused)

    async def _claim(self, session: WorkerSession, queue: str | None) -> HttpResponse:
        if queue != session.queue:
            raise RequestRefused(f"this session is bound to queue {session.queue!r}",
                                 code="wrong_queue", queue=session.queue)
        if session.waiter is not None:
            raise RequestRefused("another claim is waiting on this session",
                                 code="claim_in_progress")
        self._refuse_if_writer_stopped()
        self._touch(session)
        if not session.buffer:
            session.waiter = self.driver.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(session.waiter), self.claim_wait_s)
            except TimeoutError:
                return NO_CONTENT
            finally:
                session.waiter = None
                self._touch(session)
        if session.ended:
            raise RequestRefused("the worker session ended", code="unknown_worker")
        self._refuse_if_writer_stopped()
        return event_response(session.buffer.popleft(), self.max_body_bytes)

    async def _report(self, session: WorkerSession, call: WorkerCall) -> HttpResponse:
        report = call.report
        if call.kind == "started":
            reservation_id, execution_id = report
            reply = await session.request(lambda rid: engine.Started(
                session, rid, reservation_id, execution_id))
        elif isinstance(report, Succeeded):
            reply = await session.request(lambda rid: engine.Succeeded(
                session, rid, report.reservation_id, report.execution_id, report.result))
        else:
            assert isinstance(report, Failed)
            reply = await session.request(lambda rid: engine.Failed(
                session, rid, report.reservation_id, report.execution_id, report.error))
        return effect_response(reply, self.max_body_bytes)

    def _refuse_if_writer_stopped(self) -> None:
        """A stopped writer refuses claims too: the worker could not report the outcome,
        and buffered work is settled as interrupted by recovery after a restart."""
        if self.driver.stopped is not None:
            raise RequestRefused("the journal writer stopped", code="unavailable")

    def _wake_claims(self) -> None:
        for session in self.sessions.values():
            if session.waiter is not None and not session.waiter.done():
                session.waiter.set_result(None)

    def _touch(self, session: WorkerSession) -> None:
        """Renew the idle timer: a session lives ``idle_s`` after its last claim."""
        if session.idle_handle is not None:
            session.idle_handle.cancel()
        session.idle_handle = self.driver.loop.call_later(self.idle_s, self._expire, session)

    def _expire(self, session: WorkerSession) -> None:
        session.idle_handle = None
        if session.waiter is not None:  # a claim is waiting: not idle
            self._touch(session)
            return
        self.end(session, "idle for too long")

    def end(self, session: WorkerSession, reason: str) -> None:
        """End a session: the engine disconnects it and settles its in-flight work."""
        if session.ended:
            return
        session.ended = True
        self.sessions.pop(session.digest, None)
        if session.idle_handle is not None:
            session.idle_handle.cancel()
            session.idle_handle = None
        gone = RequestRefused("the worker session ended", code="unknown_worker")
        session.fail_pending(gone)
        if session.waiter is not None and not session.waiter.done():
            session.waiter.set_result(None)
        session.buffer.clear()
        self.driver.submit(engine.Disconnect(session))
        session.detach()
        log.info("HTTP worker %s session ended: %s", session.runtime_id, reason)

    def close(self) -> None:
        for session in list(self.sessions.values()):
            self.end(session, "server shutting down")
