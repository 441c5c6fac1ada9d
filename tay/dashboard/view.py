"""What page and action handlers work with: the request as a ``View``, the admin op call
that raises ``AdminFailed`` on a refusal, the ``Page`` they return, and ``redirect``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tay.engine.effects import Refuse, Reply
from tay.failures import TayFailure
from tay.protocol.admin_api import NULLABLE
from tay.protocol.http_api import HttpRequest, HttpResponse

PREFIX = "/ui"
AdminCall = Callable[[str, dict[str, Any], str], Awaitable[Reply | Refuse]]


class AdminFailed(Exception):
    """An admin op was refused; ``failure`` carries the wire code and message."""

    def __init__(self, failure: TayFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class Page:
    """A template, its variables and the HTTP status."""

    template: str
    context: dict[str, Any]
    status: int = 200


@dataclass
class View:
    """One dashboard request as its handler sees it."""

    admin_call: AdminCall
    request: HttpRequest
    path: str
    query: dict[str, str]
    now_ms: int
    form: dict[str, str] = field(default_factory=dict)
    back: str = PREFIX + "/"  # where a refusal page links back to (a handler sets it)

    async def admin(self, op: str, **body: Any) -> dict[str, Any]:
        """One admin op (None fields left out, unless a null is their value:
        ``NULLABLE``); a refusal raises ``AdminFailed``."""
        effect = await self.admin_call(op, {k: v for k, v in body.items()
                                            if v is not None or k in NULLABLE},
                                       f"dashboard {self.request.peer}")
        if isinstance(effect, Refuse):
            raise AdminFailed(effect.failure)
        return effect.fields

    def page(self, template: str, http_status: int = 200, **context: Any) -> Page:
        return Page(template, context, http_status)


def redirect(location: str) -> HttpResponse:
    """303 See Other: the browser follows with a GET (after an action: no resubmission)."""
    return HttpResponse(303, b"", ((b"location", location.encode("utf-8")),
                                   (b"cache-control", b"no-store")))
