"""An engine connection handle for in-process callers (the admin service, HTTP sessions):
correlated replies resolve futures. Kept apart from the HTTP stack so a server that only
listens on the Unix socket never imports it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from tay.engine.effects import Effect, Refuse, Reply
from tay.failures import RequestRefused

from .driver import EngineDriver

_request_ids = itertools.count(1)


class EnginePort:
    """An engine connection handle whose correlated replies resolve futures.

    Effects that are not replies to a pending request go to ``on_event``.
    """

    def __init__(self, driver: EngineDriver, prefix: str) -> None:
        self.driver = driver
        self.prefix = prefix
        self.pending: dict[str, asyncio.Future[Reply | Refuse]] = {}
        self.on_event: Callable[[Effect], None] | None = None
        driver.attach(self, self.deliver)

    def next_request_id(self) -> str:
        return f"{self.prefix}{next(_request_ids)}"

    def request(self, build: Callable[[str], Any],
                admit_bytes: int | None = None) -> "asyncio.Future[Reply | Refuse]":
        """Submit ``build(request_id)``; the future resolves with the released reply.
        ``admit_bytes``: a producer request that needs a client permit (``driver.submit``)."""
        request_id = self.next_request_id()
        future: asyncio.Future[Reply | Refuse] = self.driver.loop.create_future()
        self.pending[request_id] = future
        try:
            self.driver.submit(build(request_id), admit_bytes)
        except BaseException:
            self.pending.pop(request_id, None)
            raise
        return future

    def deliver(self, effect: Effect) -> None:
        if isinstance(effect, (Reply, Refuse)) and effect.request_id in self.pending:
            future = self.pending.pop(effect.request_id)
            if not future.done():
                future.set_result(effect)
        elif self.on_event is not None:
            self.on_event(effect)

    def fail_pending(self, failure: RequestRefused) -> None:
        for request_id, future in list(self.pending.items()):
            if not future.done():
                future.set_result(Refuse(self, request_id, failure))
        self.pending.clear()

    def detach(self) -> None:
        self.driver.detach(self)

    def __repr__(self) -> str:
        return f"<EnginePort {self.prefix}>"
