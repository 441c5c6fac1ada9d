"""A small blocking HTTP/1.1 client with keep-alive, run from asyncio through threads.

Why not urllib: it opens a connection per request and consults proxy settings. This pool
reuses idle connections (checked for a peer close before reuse), never follows redirects
(a redirect is a ``ProtocolError``), ignores proxies, and reads at most ``max_body + 1``
bytes of a response so an oversized one is detected without buffering it whole.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from typing import Any

from tay.errors import ConnectionLost, ProtocolError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRY_SAFE = frozenset({"GET", "DELETE", "HEAD"})
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HTTPTransport:
    """Pooled connections to one origin."""

    def __init__(self, *, scheme: str, host: str, port: int | None, timeout: float,
                 context: ssl.SSLContext | None, max_body: int, pool_size: int = 8) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.timeout = timeout
        self.context = context
        self.max_body = max_body
        self.pool_size = pool_size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _new_connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.context)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _checkout(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if _still_usable(connection):
                    return connection, True
                connection.close()
        return self._new_connection(), False

    def _checkin(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def exchange(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        """Send one request; returns (status, body). Blocking: call via ``asyncio.to_thread``."""
        connection, reused = self._checkout()
        try:
            return self._exchange_on(connection, method, path, body, headers)
        except _STALE_ERRORS as exc:
            # A kept-alive connection the server had just closed: the request never got
            # in. Only idempotent methods are retried; a POST outcome stays unknown.
            if not (reused and method in _RETRY_SAFE):
                raise ConnectionLost(f"{method} {path}: {exc!r}; the outcome is unknown") from exc
            return self._exchange_on(self._new_connection(), method, path, body, headers)

    def _exchange_on(self, connection: http.client.HTTPConnection, method: str, path: str,
                     body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read(self.max_body + 1)
        except _STALE_ERRORS:
            connection.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ConnectionLost(f"{method} {path} to {self.host}: {exc!r}; the outcome is unknown") from exc
        if response.status in _REDIRECTS:
            connection.close()
            raise ProtocolError(f"Tay answered {method} {path} with a redirect ({response.status}); redirects are refused")
        if len(data) > self.max_body or response.will_close or not response.isclosed():
            connection.close()  # unread remainder or server-side close: never reuse
        else:
            self._checkin(connection)
        return response.status, data


def _still_usable(connection: Any) -> bool:
    """An idle keep-alive socket that is readable has been closed (or sent junk)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
