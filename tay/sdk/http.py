"""``TayHTTP``: the async producer over Tay's HTTP/JSON API (plain loopback or mTLS).

Plain HTTP is allowed only to loopback (``localhost`` counts); any other host needs
``https`` plus client credentials: a PEM trio (CA, certificate, key: all three or none)
or a PKCS#12 bundle, never both. Responses above 1 MiB are refused without buffering.
"""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self, TypeVar, Unpack, overload

import orjson

from tay.errors import ProtocolError, ValidationError
import tay.sdk.options as opts
from tay.sdk.handles import (HTTPJobHandle, ScheduleHandle, SchedulePage, check_page_request, collect_schedules,
                             quote_segment, schedule_page_from_reply)
from tay.sdk.http_transport import HTTPTransport
from tay.sdk.options import Durability, EnqueueOptions
from tay.sdk.task import Task, TaskCall, call_parts
from tay.sdk.tls import client_context
from tay.sdk.wire import json_bytes, plain_json, reply_durability, reply_identifier, server_error, validate_task_name

R = TypeVar("R")

MAX_HTTP_RESPONSE_BYTES = 1_048_576
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def _origin(base_url: Any) -> urllib.parse.SplitResult:
    if not isinstance(base_url, str):
        raise ValidationError(f"base_url must be a string such as 'http://127.0.0.1:8080', got {base_url!r}")
    parsed = urllib.parse.urlsplit(base_url)
    if (parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/")
            or parsed.query or parsed.fragment or parsed.username or parsed.password):
        raise ValidationError(f"base_url must be an http(s) origin without path, query or credentials, got {base_url!r}")
    try:
        port = parsed.port
    except ValueError as exc:
        raise ValidationError(f"base_url {base_url!r} has an invalid port") from exc
    if port is not None and not 1 <= port <= 65_535:
        raise ValidationError(f"base_url {base_url!r} has an invalid port")
    return parsed


def _is_loopback(hostname: str) -> bool:
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return hostname == "localhost"


def _check_credentials(parsed: urllib.parse.SplitResult, pem: tuple[Any, Any, Any],
                       pkcs12_file: Any, pkcs12_password: Any) -> None:
    if pkcs12_file is not None and any(item is not None for item in pem):
        raise ValidationError("use either PKCS#12 or PEM credentials, not both")
    if pkcs12_file is None and pkcs12_password is not None:
        raise ValidationError("tls_pkcs12_password requires tls_pkcs12_file")
    if any(item is not None for item in pem) and not all(item is not None for item in pem):
        raise ValidationError("mTLS requires all of tls_ca_file, tls_cert_file and tls_key_file")
    has_credentials = pem[0] is not None or pkcs12_file is not None
    if not _is_loopback(parsed.hostname or "") and (parsed.scheme != "https" or not has_credentials):
        raise ValidationError(
            f"{parsed.hostname} is not a loopback address: use an https:// URL with mTLS credentials "
            "(tls_ca_file/tls_cert_file/tls_key_file or tls_pkcs12_file)"
        )
    if has_credentials and parsed.scheme != "https":
        raise ValidationError("TLS credentials require an https:// base_url")


class TayHTTP:
    """Async HTTP/JSON producer: enqueue, job handles and schedules."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        request_timeout: float = 30.0,
        tls_ca_file: str | Path | None = None,
        tls_cert_file: str | Path | None = None,
        tls_key_file: str | Path | None = None,
        tls_pkcs12_file: str | Path | None = None,
        tls_pkcs12_password: str | bytes | None = None,
    ) -> None:
        parsed = _origin(base_url)
        if not isinstance(request_timeout, (int, float)) or not request_timeout > 0:
            raise ValidationError(f"request_timeout must be a positive number of seconds, got {request_timeout!r}")
        _check_credentials(parsed, (tls_ca_file, tls_cert_file, tls_key_file), tls_pkcs12_file, tls_pkcs12_password)
        context = None
        if parsed.scheme == "https":
            context = client_context(ca_file=tls_ca_file, cert_file=tls_cert_file, key_file=tls_key_file,
                                     pkcs12_file=tls_pkcs12_file, pkcs12_password=tls_pkcs12_password)
        self.base_url = base_url.rstrip("/")
        self.request_timeout = request_timeout
        self._context = context
        self._transport = HTTPTransport(scheme=parsed.scheme, host=parsed.hostname or "", port=parsed.port,
                                        timeout=float(request_timeout), context=context,
                                        max_body=MAX_HTTP_RESPONSE_BYTES)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close idle keep-alive connections."""
        self._transport.close()

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                       headers: dict[str, str] | None = None) -> dict[str, Any]:
        payload = json_bytes(plain_json(body)) if body is not None else None  # encoded at once: no copy
        status, raw = await self._transport.exchange(method, path, payload, {**_JSON_HEADERS, **(headers or {})})
        return _reply(method, path, status, raw)

    @staticmethod
    def _task_name(task: str | Task[Any, Any]) -> str:
        return task.name if isinstance(task, Task) else validate_task_name(task)

    @overload
    async def enqueue(self, task: TaskCall[R], args: None = None, *, options: Mapping[str, Any] | None = None,
                      durability: Durability | None = None,
                      **option_keywords: Unpack[EnqueueOptions]) -> HTTPJobHandle[R]: ...
    @overload
    async def enqueue(self, task: str | Task[Any, Any], args: Mapping[str, Any] | None = None, *,
                      options: Mapping[str, Any] | None = None, durability: Durability | None = None,
                      **option_keywords: Unpack[EnqueueOptions]) -> HTTPJobHandle[Any]: ...

    async def enqueue(
        self,
        task: str | Task[Any, Any] | TaskCall[Any],
        args: Mapping[str, Any] | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        durability: Durability | None = None,
        **option_keywords: Any,
    ) -> HTTPJobHandle[Any]:
        """Submit one job (``POST /jobs``); the same options as ``Tay.enqueue``."""
        name, args, options = call_parts(task, args, options, option_keywords, durability, self._task_name)
        body = {
            "task": name,
            "args": opts.enqueue_args(args),  # checked as the body is encoded
            "options": opts.merge_enqueue_options(options, durability, option_keywords),
        }
        reply = await self._request("POST", "/jobs", body)
        return HTTPJobHandle(reply_identifier(reply, "job_id", "job"), self, reply_durability(reply))

    # -- schedules (POST/GET/DELETE /schedules) -----------------------------------------

    async def schedule(self, task: str | Task[Any, Any], *, cron: str, kwargs: Mapping[str, Any] | None = None,
                       args: Mapping[str, Any] | None = None, declaration_id: str | None = None,
                       timezone: str = "+00", catch_up: str = "latest", overlap: str | None = None,
                       delay: float | None = None, start_at: int | None = None, **options: Any) -> ScheduleHandle:
        """Create or redeclare a durable cron schedule."""
        opts.check_cron(cron)
        body = opts.schedule_payload(self._task_name(task), kwargs, args, declaration_id, timezone, catch_up,
                                overlap, delay, start_at, options, {"cron": cron, "timezone": timezone})
        reply = await self._request("POST", "/schedules", body)
        return ScheduleHandle(reply_identifier(reply, "schedule_id", "schedule"), self)

    async def every(self, task: str | Task[Any, Any], *, seconds: float | None = None, minutes: float | None = None,
                    hours: float | None = None, days: float | None = None, kwargs: Mapping[str, Any] | None = None,
                    args: Mapping[str, Any] | None = None, declaration_id: str | None = None,
                    catch_up: str = "latest", overlap: str | None = None, delay: float | None = None,
                    start_at: int | None = None, **options: Any) -> ScheduleHandle:
        """Create or redeclare a durable interval schedule (exactly one unit)."""
        every = opts.every_mapping({"seconds": seconds, "minutes": minutes, "hours": hours, "days": days})
        body = opts.schedule_payload(self._task_name(task), kwargs, args, declaration_id, "+00", catch_up,
                                overlap, delay, start_at, options, {"every": every})
        reply = await self._request("POST", "/schedules", body)
        return ScheduleHandle(reply_identifier(reply, "schedule_id", "schedule"), self)

    async def schedule_page(self, *, limit: int = 50, cursor: str | None = None) -> SchedulePage:
        """One bounded page (``GET /schedules?limit=&cursor=``)."""
        check_page_request(limit, cursor)
        query = {"limit": str(limit)}
        if cursor is not None:
            query["cursor"] = cursor
        return schedule_page_from_reply(await self._request("GET", "/schedules?" + urllib.parse.urlencode(query)))

    async def schedules(self, *, page_size: int = 50) -> list[dict[str, Any]]:
        """Every schedule, following ``next_cursor`` until the last page."""
        return await collect_schedules(self.schedule_page, page_size)

    async def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        """The stored schedule object (``GET /schedules/:id``)."""
        reply = await self._schedule_status(schedule_id)
        return reply.get("schedule", reply)

    def _schedule_path(self, schedule_id: str) -> str:
        if type(schedule_id) is not str or not schedule_id:
            raise ValidationError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
        return f"/schedules/{quote_segment(schedule_id)}"

    async def _schedule_status(self, schedule_id: str) -> dict[str, Any]:
        return await self._request("GET", self._schedule_path(schedule_id))

    async def _cancel_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._request("DELETE", self._schedule_path(schedule_id))


def _reply(method: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
    """Interpret one response: 204 is ``{}``; an ``error`` object raises ServerError."""
    if status == 204 and not raw:
        return {}
    if len(raw) > MAX_HTTP_RESPONSE_BYTES:
        raise ProtocolError(f"Tay's response to {method} {path} exceeds {MAX_HTTP_RESPONSE_BYTES} bytes")
    try:
        reply = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"Tay's response to {method} {path} (HTTP {status}) is not JSON") from exc
    if not isinstance(reply, dict):
        raise ProtocolError(f"Tay's response to {method} {path} is not a JSON object")
    if isinstance(reply.get("error"), dict):
        raise server_error(reply["error"])
    if not 200 <= status < 300:
        raise ProtocolError(f"Tay answered {method} {path} with unexpected HTTP status {status}")
    return reply
