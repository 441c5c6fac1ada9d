"""Request deadlines of one connection: one timer for all of them, not one per request.

Every forwarded request gets the same timeout, so deadlines arrive in order: they live in
one FIFO. An answered request is only marked; answered entries leave the FIFO as soon as
they reach its head (answers mostly come in order, so it stays about as long as the number
of requests in flight). One loop timer is armed at the head's deadline; when it fires it
expires every pending entry that is due, drops answered ones and re-arms at the new head,
so a steady stream of quickly answered requests costs about one timer callback per timeout
period instead of a ``call_later`` and a cancel per request.

Answers for one ``request_id`` settle its entries first-in first-out, as before.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


# One request's entry is a list [deadline, request_id, pending] (mutable: an answer marks
# it), made without an object and an __init__ frame per request.
_DEADLINE, _PENDING = 0, 2


class RequestDeadlines:
    """Pending forwarded requests of one connection, by arrival, with one timer."""

    __slots__ = ("_loop", "_timeout_s", "_on_expired", "_fifo", "_by_id", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float,
                 on_expired: Callable[[str], None]) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._on_expired = on_expired
        self._fifo: deque[list] = deque()  # entries by arrival
        # the pending entry of an id, or a deque of them when a client reuses the id
        self._by_id: dict[str, list | deque[list]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def waiting(self) -> dict[str, list | deque[list]]:
        """The ids with a pending entry (one dict for the object's life, changed in place):
        an answer whose id is not in it has nothing to settle, tested without a call."""
        return self._by_id

    def add(self, request_id: str) -> None:
        """A forwarded request starts waiting for its answer."""
        deadline = self._loop.time() + self._timeout_s
        entry = [deadline, request_id, True]
        self._fifo.append(entry)
        same = self._by_id.get(request_id)
        if same is None:
            self._by_id[request_id] = entry
        elif type(same) is list:
            self._by_id[request_id] = deque((same, entry))
        else:
            same.append(entry)
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._fire)

    def answer(self, request_id: str) -> bool:
        """Settle the oldest pending request with this id; False if none is pending."""
        same = self._by_id.get(request_id)
        if same is None:
            return False
        if type(same) is list:
            same[_PENDING] = False
            del self._by_id[request_id]
        else:
            same.popleft()[_PENDING] = False
            if len(same) == 1:
                self._by_id[request_id] = same[0]
        fifo = self._fifo
        while fifo and not fifo[0][_PENDING]:
            fifo.popleft()
        return True

    def _fire(self) -> None:
        self._timer = None
        fifo, now = self._fifo, self._loop.time()
        while fifo and (not fifo[0][_PENDING] or fifo[0][_DEADLINE] <= now):
            _, request_id, pending = fifo.popleft()
            if pending:
                self.answer(request_id)  # the oldest with its id: FIFO per id
                self._on_expired(request_id)
        if fifo:
            self._timer = self._loop.call_at(fifo[0][_DEADLINE], self._fire)

    def close(self) -> None:
        """The connection is gone: forget everything, stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._fifo.clear()
        self._by_id.clear()
