"""A synchronous operations-API client over the Unix socket or HTTP(S) (docs/admin.md).

Standard library only, so ``tay status`` starts fast and works where only the CLI is
installed. The socket path is found like the SDK finds it (explicit path,
``TAY_SOCKET_PATH``, ``/run/tay``, ...). A refusal raises ``AdminRefused`` with the wire
code; no reachable engine raises ``AdminUnreachable``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import struct
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from tay.protocol.admin_api import NULLABLE, PATH_FIELDS, ROUTES
from tay.socket_discovery import SocketPathError, discover_socket

MAX_FRAME_BYTES = 16 * 1024 * 1024


class AdminRefused(Exception):
    """The engine refused the request (``code`` is the wire code)."""

    def __init__(self, code: str, message: str, error: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.error = error


class AdminUnreachable(Exception):
    """No engine answered at the chosen address."""


class AdminTimeout(AdminUnreachable):
    """The engine did not answer within the client's timeout (it may still be working)."""


class SocketAdmin:
    def __init__(self, path: str | None, timeout_s: float = 30.0) -> None:
        try:
            self.path = discover_socket(path, explicit_option="--socket").path
        except SocketPathError as error:
            raise AdminUnreachable(str(error)) from None
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._counter = 0

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            try:
                sock.connect(self.path)
            except OSError as error:
                sock.close()
                raise AdminUnreachable(f"cannot connect to {self.path}: {error.strerror or error}") \
                    from None
            self._sock = sock
            self._exchange("hello", {"mode": "client", "runtime_id": f"tay-cli-{os.getpid()}",
                                     "max_concurrency": 0})
        return self._sock

    def call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        self._connect()
        return self._exchange(f"admin_{op}", body)

    def _exchange(self, message_type: str, fields: dict[str, Any]) -> dict[str, Any]:
        assert self._sock is not None
        self._counter += 1
        request_id = f"cli-{self._counter}"
        payload = json.dumps({"version": 1, "type": message_type, "request_id": request_id,
                              **fields}, separators=(",", ":")).encode()
        try:
            self._sock.sendall(struct.pack(">I", len(payload)) + payload)
            (length,) = struct.unpack(">I", self._read(4))
            if not 0 < length <= MAX_FRAME_BYTES:
                raise AdminUnreachable(f"bad frame length {length} from {self.path}")
            reply = json.loads(self._read(length))
        except TimeoutError:
            self.close()  # a late answer must not be read as the next request's
            raise AdminTimeout(f"{self.path}: no answer within {self.timeout_s:g} s") from None
        except (OSError, ValueError) as error:
            raise AdminUnreachable(f"{self.path}: {error}") from None
        if reply.get("type") == "error":
            error = reply.get("error") or {}
            raise AdminRefused(str(error.get("code")), str(error.get("message", "")), error)
        return {k: v for k, v in reply.items() if k not in ("version", "request_id")}

    def _read(self, count: int) -> bytes:
        assert self._sock is not None
        data = b""
        while len(data) < count:
            chunk = self._sock.recv(count - len(data))
            if not chunk:
                raise AdminUnreachable(f"{self.path} closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class HttpAdmin:
    """``http://`` (loopback) or ``https://`` with a CA file and a client certificate."""

    def __init__(self, url: str, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AdminUnreachable(f"--url must be http://HOST:PORT or https://HOST:PORT, got {url!r}")
        context = None
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca)
            if cert:
                context.load_cert_chain(cert, key)
        self.url = url
        self.timeout_s = timeout_s
        self._connection = (http.client.HTTPSConnection(parts.hostname, parts.port or 443,
                                                        timeout=timeout_s, context=context)
                            if context is not None else
                            http.client.HTTPConnection(parts.hostname, parts.port or 80,
                                                       timeout=timeout_s))

    def call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        method, pattern = ROUTES[op]
        body = dict(body)
        path = pattern
        for placeholder, field in PATH_FIELDS.items():
            if placeholder in path:
                path = path.replace(placeholder, quote(str(body.pop(field, "")), safe=""))
        # a null is left out of the query, unless it is a value (NULLABLE spells it)
        query = {k: NULLABLE[k] if v is None else v for k, v in body.items()
                 if v is not None or k in NULLABLE}
        if isinstance(query.get("args"), dict):  # an object travels as its JSON text
            query["args"] = json.dumps(query["args"], separators=(",", ":"))
        if query:
            path += "?" + urlencode(query)
        try:
            self._connection.request(method, path)
            response = self._connection.getresponse()
            data = response.read()
        except TimeoutError:
            self.close()
            raise AdminTimeout(f"{self.url}: no answer within {self.timeout_s:g} s") from None
        except (OSError, http.client.HTTPException) as error:
            raise AdminUnreachable(f"{self.url}: {error}") from None
        try:
            reply = json.loads(data)
        except ValueError:
            raise AdminUnreachable(f"{self.url}: HTTP {response.status} without JSON") from None
        if response.status >= 400:
            error = reply.get("error") or {}
            raise AdminRefused(str(error.get("code")), str(error.get("message", "")), error)
        return reply

    def close(self) -> None:
        self._connection.close()
