"""Handles returned by ``enqueue`` and ``schedule``: cheap references, not cached state.

Every method asks the server; the server stays authoritative about the job or schedule.
"""

from __future__ import annotations

import asyncio
import math
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tay.errors import ProtocolError, ResultTimeout, ServerError, ValidationError
from tay.sdk.options import Durability
from tay.sdk.wire import server_error

R = TypeVar("R")


class SocketRequests(Protocol):
    """What a socket job handle asks its client for (``Tay`` provides it)."""

    async def _request(self, message_type: str, fields: Mapping[str, Any]) -> dict[str, Any]: ...


class HTTPRequests(Protocol):
    """What an HTTP job handle asks its client for (``TayHTTP`` provides it)."""

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                       headers: dict[str, str] | None = None) -> dict[str, Any]: ...


class ScheduleRequests(Protocol):
    """What a schedule handle asks its client for (both transports provide it)."""

    async def _schedule_status(self, schedule_id: str) -> dict[str, Any]: ...
    async def _cancel_schedule(self, schedule_id: str) -> dict[str, Any]: ...


def quote_segment(segment: str) -> str:
    """One URL path segment, percent-encoded (job ids, queue and schedule names)."""
    return urllib.parse.quote(segment, safe="")


def status_from_reply(reply: Mapping[str, Any]) -> Any:
    """The state string of a ``status``/``cancelled`` reply (or the job, or the reply)."""
    return reply.get("status", reply.get("job", reply))


def result_from_reply(reply: Mapping[str, Any]) -> Any:
    """The stored result; JSON null is a valid result. An ``error`` field raises."""
    if reply.get("error"):
        raise server_error(reply["error"])
    return reply.get("result")


# ``result(timeout=...)`` polls: quickly at first (short jobs), then at most every 100 ms.
FIRST_POLL_S = 0.002
MAX_POLL_S = 0.1


async def wait_for_result(fetch: Callable[[], Awaitable[Mapping[str, Any]]], job_id: str,
                          timeout: float | None) -> Any:
    """The job's result; with ``timeout``, ask again while it is ``result_not_ready``."""
    if timeout is None:
        return result_from_reply(await fetch())
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0 \
            or math.isnan(timeout):
        raise ValidationError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = FIRST_POLL_S
    while True:
        try:
            return result_from_reply(await fetch())
        except ServerError as error:
            if error.code != "result_not_ready":
                raise
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise ResultTimeout(f"job {job_id} has no result after {timeout:g}s: it is still pending "
                                "(ask again later, or cancel it)", job_id=job_id)
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, MAX_POLL_S)


@dataclass(frozen=True)
class JobHandle(Generic[R]):
    """A reference to one job: ``id`` plus the durability Tay reported at enqueue.

    ``JobHandle[R]``: ``result()`` returns the task's result type when the job came from a
    typed ``Task`` (``task.enqueue(...)``, ``tay.enqueue(task.bind(...))``).
    """

    id: str
    _tay: SocketRequests = field(repr=False)
    durability: Durability | None = None

    async def status(self) -> Any:
        """The job's current state: ``available``, ``executing``, ``completed``, ..."""
        return status_from_reply(await self._tay._request("status", {"job_id": self.id}))

    async def cancel(self) -> Any:
        """Ask Tay to cancel the job; returns the state Tay reports afterwards."""
        reply = await self._tay._request("cancel", {"job_id": self.id})
        return reply.get("status", reply)

    async def result(self, *, timeout: float | None = None) -> R:
        """The stored result of a completed job.

        ``timeout`` (seconds) waits for the job to finish and raises ``ResultTimeout`` if it
        is still pending then; without it a pending job raises ``ServerError`` with code
        ``result_not_ready`` at once (as tay-client does). Either way ``result_missing``
        means it completed without a retained result, ``task_cancelled`` that it was
        cancelled, and ``RemoteTaskError`` (``task_failed``) that its task failed.
        """
        result: R = await wait_for_result(lambda: self._tay._request("result", {"job_id": self.id}),
                                          self.id, timeout)
        return result


@dataclass(frozen=True)
class HTTPJobHandle(Generic[R]):
    """A reference to one job submitted over HTTP (the methods of ``JobHandle``)."""

    id: str
    _tay: HTTPRequests = field(repr=False)
    durability: Durability | None = None

    async def status(self) -> Any:
        return status_from_reply(await self._tay._request("GET", f"/jobs/{quote_segment(self.id)}"))

    async def cancel(self) -> Any:
        reply = await self._tay._request("DELETE", f"/jobs/{quote_segment(self.id)}")
        return reply.get("status", reply)

    async def result(self, *, timeout: float | None = None) -> R:
        """As ``JobHandle.result``: ``timeout`` waits, raising ``ResultTimeout`` on expiry."""
        path = f"/jobs/{quote_segment(self.id)}/result"
        result: R = await wait_for_result(lambda: self._tay._request("GET", path), self.id, timeout)
        return result


@dataclass(frozen=True)
class ScheduleHandle:
    """A reference to one durable schedule by id."""

    id: str
    _tay: ScheduleRequests = field(repr=False)

    async def status(self) -> Any:
        """The stored schedule object (definition, revision, next/last due, active job)."""
        reply = await self._tay._schedule_status(self.id)
        return reply.get("schedule", reply)

    async def cancel(self) -> Any:
        """Cancel future occurrences; returns the schedule object with ``cancelled_at``."""
        reply = await self._tay._cancel_schedule(self.id)
        return reply.get("schedule", reply.get("status", reply))


@dataclass(frozen=True)
class SchedulePage:
    """One bounded page of schedules; ``next_cursor`` is None on the last page."""

    schedules: list[dict[str, Any]]
    next_cursor: str | None


def schedule_page_from_reply(reply: Mapping[str, Any]) -> SchedulePage:
    schedules = reply.get("schedules")
    cursor = reply.get("next_cursor")
    if not isinstance(schedules, list) or not all(isinstance(item, dict) for item in schedules):
        raise ProtocolError("Tay's schedules reply has no list of schedule objects")
    if cursor is not None and (type(cursor) is not str or not cursor):
        raise ProtocolError(f"Tay's schedules reply has an invalid next_cursor {cursor!r}")
    return SchedulePage(schedules, cursor)


def check_page_request(limit: Any, cursor: Any) -> None:
    """The bounds of one schedules page request, shared by the socket and HTTP clients."""
    if type(limit) is not int or not 1 <= limit <= 100:
        raise ValidationError(f"limit must be an integer in 1..100, got {limit!r}")
    if cursor is not None and (type(cursor) is not str or not cursor):
        raise ValidationError(f"cursor must be a non-empty string from next_cursor, got {cursor!r}")


async def collect_schedules(fetch_page: Callable[..., Awaitable[SchedulePage]], page_size: int) -> list[dict[str, Any]]:
    """Every schedule, following ``next_cursor`` until the last page (or a cursor that repeats)."""
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = await fetch_page(limit=page_size, cursor=cursor)
        found.extend(page.schedules)
        if page.next_cursor is None or page.next_cursor == cursor:
            return found
        cursor = page.next_cursor
