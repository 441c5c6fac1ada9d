"""Handles returned by ``enqueue`` and ``schedule``: cheap references, not cached state.

Every method asks the server; the server stays authoritative about the job or schedule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tay.errors import ProtocolError, ValidationError
from tay.sdk.options import Durability
from tay.sdk.wire import server_error

if TYPE_CHECKING:  # pragma: no cover
    from tay.sdk.client import Tay


def status_from_reply(reply: Mapping[str, Any]) -> Any:
    """The state string of a ``status``/``cancelled`` reply (or the job, or the reply)."""
    return reply.get("status", reply.get("job", reply))


def result_from_reply(reply: Mapping[str, Any]) -> Any:
    """The stored result; JSON null is a valid result. An ``error`` field raises."""
    if reply.get("error"):
        raise server_error(reply["error"])
    return reply.get("result")


@dataclass(frozen=True)
class JobHandle:
    """A reference to one job: ``id`` plus the durability Tay reported at enqueue."""

    id: str
    _tay: Tay = field(repr=False)
    durability: Durability | None = None

    async def status(self) -> Any:
        """The job's current state: ``available``, ``executing``, ``completed``, ..."""
        return status_from_reply(await self._tay._request("status", {"job_id": self.id}))

    async def cancel(self) -> Any:
        """Ask Tay to cancel the job; returns the state Tay reports afterwards."""
        reply = await self._tay._request("cancel", {"job_id": self.id})
        return reply.get("status", reply)

    async def result(self) -> Any:
        """The stored result of a completed job.

        Raises ``ServerError`` with code ``result_not_ready`` while it is pending,
        ``result_missing`` when it completed without a retained result, ``task_cancelled``
        when cancelled, and ``RemoteTaskError`` (``task_failed``) when its task failed.
        """
        return result_from_reply(await self._tay._request("result", {"job_id": self.id}))


@dataclass(frozen=True)
class ScheduleHandle:
    """A reference to one durable schedule by id."""

    id: str
    _tay: Tay = field(repr=False)

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
