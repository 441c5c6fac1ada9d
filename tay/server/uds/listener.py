"""The Unix-socket listener: binds the resolved path, admits connections up to the limit,
and on close stops accepting, lets released work settle, and unlinks the socket."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tay.protocol.limits import ProtocolLimits

from .socket_path import SocketPlan, bind_unix_socket, remove_socket

if TYPE_CHECKING:
    from ..driver import EngineDriver
    from .connection import Connection

log = logging.getLogger("tay.server")


class Listener:
    """Listener-lifetime state shared by its connections."""

    def __init__(self, driver: "EngineDriver", limits: ProtocolLimits) -> None:
        self.driver = driver
        self.limits = limits
        self.connections: set["Connection"] = set()
        # connected but no hello yet, oldest first: what the limit makes room from
        self._unnamed: dict["Connection", None] = {}
        self._server: asyncio.AbstractServer | None = None
        self._path: str | None = None
        self.admin: Any = None  # the AdminService, set by app.serve (docs/admin.md)

    def admit(self, connection: "Connection") -> bool:
        """Take ``connection`` unless the limit is reached. At the limit, the oldest
        connection that has not said hello yet makes room (it gets ``connection_limit``):
        idle or half-open sockets cannot lock out clients that are ready to talk, and a
        client that says hello at once is never the one displaced. Only when every
        connection said hello is the newcomer refused (accepted, then closed)."""
        if len(self.connections) >= self.limits.max_connections:
            if not self._unnamed:
                return False
            oldest = next(iter(self._unnamed))
            self.release(oldest)
            oldest.close_fatal(f"the {self.limits.max_connections}-connection limit was "
                               "reached and this connection had not said hello",
                               "connection_limit")
        self.connections.add(connection)
        self._unnamed[connection] = None
        return True

    def greeted(self, connection: "Connection") -> None:
        """``connection`` said hello: it no longer makes room for newcomers."""
        self._unnamed.pop(connection, None)

    def release(self, connection: "Connection") -> None:
        self.connections.discard(connection)
        self._unnamed.pop(connection, None)

    async def _settle(self, deadline: float) -> None:
        while not self.driver.idle and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def start(self, plan: SocketPlan, mode: int = 0o600) -> str:
        from .connection import Connection

        sock = bind_unix_socket(plan, mode)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: Connection(self), sock=sock)
        self._path = plan.path
        log.info("tay listening on unix socket %s", plan.path)
        return plan.path

    async def close(self, settle_timeout_s: float = 5.0) -> None:
        """Stop accepting, wait for released work to flush, close connections, unlink.

        Closed connections disconnect from the engine (their in-flight executions become
        interrupted events), so the driver is waited for once more afterwards: those
        events are committed while the journal is still open, and a clean stop logs no
        error."""
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle_timeout_s
        await self._settle(deadline)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.flush()  # replies released this turn are still queued
                connection.transport.close()
        await asyncio.sleep(0)  # connection_lost runs on a later loop turn
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)  # a peer that does not read delays its close
        for connection in list(self.connections):
            connection.transport.abort()
        await asyncio.sleep(0)
        await self._settle(deadline)
        if self._server is not None:
            await self._server.wait_closed()
        if self._path is not None:
            remove_socket(self._path)
            self._path = None
