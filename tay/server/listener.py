"""The Unix-socket listener: binds the resolved path, admits connections up to the limit,
and on close stops accepting, lets released work settle, and unlinks the socket."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tay.protocol.limits import ProtocolLimits

from .socket_path import SocketPlan, bind_unix_socket, remove_socket

if TYPE_CHECKING:
    from .connection import Connection
    from .driver import EngineDriver

log = logging.getLogger("tay.server")


class Listener:
    """Listener-lifetime state shared by its connections."""

    def __init__(self, driver: "EngineDriver", limits: ProtocolLimits) -> None:
        self.driver = driver
        self.limits = limits
        self.connections: set["Connection"] = set()
        self._server: asyncio.AbstractServer | None = None
        self._path: str | None = None
        self.admin: Any = None  # the AdminService, set by app.serve (docs/admin.md)

    def admit(self, connection: "Connection") -> bool:
        if len(self.connections) >= self.limits.max_connections:
            return False
        self.connections.add(connection)
        return True

    def release(self, connection: "Connection") -> None:
        self.connections.discard(connection)

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
