"""The operations API on the wire (docs/admin.md), sans-IO: one op table for both transports.

On the Unix socket an op is the message type ``admin_<op>`` (after ``hello``); its fields
besides the envelope are the op's body, and the reply type is the same ``admin_<op>``. Over
HTTP each op has one route under ``/admin``; path segments and query parameters become the
same body (``limit`` as an integer), so both transports reach the same engine command.
"""

from __future__ import annotations

from typing import Any

import orjson

from tay._frozen import Frozen, set_field
from tay.failures import RequestRefused

# op -> (HTTP method, path pattern); {id} / {name} are path parameters
ROUTES: dict[str, tuple[str, str]] = {
    "status": ("GET", "/admin/status"),
    "jobs": ("GET", "/admin/jobs"),
    "retry_jobs": ("POST", "/admin/jobs/retry"),  # before "job": a literal segment wins
    "cancel_jobs": ("POST", "/admin/jobs/cancel"),
    "delete_jobs": ("POST", "/admin/jobs/delete"),
    "job": ("GET", "/admin/jobs/{id}"),
    "retry_job": ("POST", "/admin/jobs/{id}/retry"),
    "cancel_job": ("POST", "/admin/jobs/{id}/cancel"),
    "delete_job": ("POST", "/admin/jobs/{id}/delete"),
    "queues": ("GET", "/admin/queues"),
    "pause_queue": ("POST", "/admin/queues/{name}/pause"),
    "resume_queue": ("POST", "/admin/queues/{name}/resume"),
    "scale_queue": ("POST", "/admin/queues/{name}/scale"),
    "limit_queue": ("POST", "/admin/queues/{name}/limit"),
    "purge_queue": ("POST", "/admin/queues/{name}/purge"),
    "workers": ("GET", "/admin/workers"),
    "quiet_worker": ("POST", "/admin/workers/{runtime}/quiet"),
    "unquiet_worker": ("POST", "/admin/workers/{runtime}/unquiet"),
    "tasks": ("GET", "/admin/tasks"),
    "schedules": ("GET", "/admin/schedules"),
    "schedule": ("GET", "/admin/schedules/{schedule}"),
    "cancel_schedule": ("POST", "/admin/schedules/{schedule}/cancel"),
    "run_schedule": ("POST", "/admin/schedules/{schedule}/run"),
    "pause_schedule": ("POST", "/admin/schedules/{schedule}/pause"),
    "resume_schedule": ("POST", "/admin/schedules/{schedule}/resume"),
    "activity": ("GET", "/admin/activity"),
    "history": ("GET", "/admin/history"),
    "actions": ("GET", "/admin/actions"),
    "compact": ("POST", "/admin/compact"),
}
OPS = frozenset(ROUTES)
# the ops that change something (POST): each one is logged and kept in ``actions``
ACTIONS = frozenset(op for op, (method, _) in ROUTES.items() if method == "POST")
SOCKET_TYPES = {f"admin_{op}": op for op in ROUTES}
QUERY_FIELDS: dict[str, frozenset[str]] = {
    "jobs": frozenset({"state", "queue", "task", "args", "error", "limit", "cursor"}),
    "schedules": frozenset({"limit", "cursor"}),
    "activity": frozenset({"limit"}),
    "history": frozenset({"days"}),
    "actions": frozenset({"limit"}),
    "tasks": frozenset({"limit", "window"}),
    "purge_queue": frozenset({"limit"}),
    "scale_queue": frozenset({"concurrency"}),
    "limit_queue": frozenset({"starts", "period_ms"}),
    "retry_jobs": frozenset({"state", "queue", "task", "args", "error", "limit", "cursor"}),
    "cancel_jobs": frozenset({"state", "queue", "task", "args", "error", "limit", "cursor"}),
    "delete_jobs": frozenset({"state", "queue", "task", "args", "error", "limit", "cursor"}),
}
PATH_FIELDS = {"{id}": "job_id", "{name}": "queue", "{schedule}": "schedule_id",
               "{runtime}": "runtime_id"}
# fields whose null is a value (elsewhere a null is the field left out), and how a query
# parameter spells that null (HTTP has none)
NULLABLE = {"concurrency": "configured", "starts": "none", "period_ms": "none"}
# the integers among them: at most this many digits (the engine checks the bounds)
_DIGITS = {"concurrency": 6, "starts": 6, "period_ms": 9}


class AdminRequest(Frozen):
    """One admin request from either transport."""

    __slots__ = ("request_id", "op", "body")
    request_id: str
    op: str
    body: dict[str, Any]

    def __init__(self, request_id: str, op: str, body: dict[str, Any]) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "op", op)
        set_field(self, "body", body)


def socket_request(message_type: str, request_id: str, message: dict[str, Any]) -> AdminRequest:
    body = {key: value for key, value in message.items()
            if key not in ("version", "v", "type", "request_id")}
    return AdminRequest(request_id, SOCKET_TYPES[message_type], body)


def route_admin(method: str, parts: list[str], query: str) -> AdminRequest | None:
    """The admin request for ``/admin/...`` path ``parts`` (after ``admin``), or None when
    no route matches. A wrong method is ``method_not_allowed`` naming the right one."""
    for op, (route_method, pattern) in ROUTES.items():
        segments = pattern.split("/")[2:]
        if len(segments) != len(parts):
            continue
        body: dict[str, Any] = {}
        for segment, part in zip(segments, parts):
            if segment in PATH_FIELDS:
                if not part:
                    break
                body[PATH_FIELDS[segment]] = part
            elif segment != part:
                break
        else:
            if method != route_method and not (method == "HEAD" and route_method == "GET"):
                raise RequestRefused(f"method {method[:16]} not allowed; use {route_method}",
                                     code="method_not_allowed", allow=route_method)
            body.update(_query(op, query))
            return AdminRequest("", op, body)
    return None


def _query(op: str, query: str) -> dict[str, Any]:
    from urllib.parse import parse_qsl  # HTTP only: the socket transport never loads it

    allowed = QUERY_FIELDS.get(op, frozenset())
    params: dict[str, Any] = {}
    for key, text in parse_qsl(query, keep_blank_values=True):
        if key not in allowed:
            raise RequestRefused(f"unknown query parameter {key[:64]!r}", code="invalid_request",
                                 field=key[:64])
        if key in params:
            raise RequestRefused(f"query parameter {key!r} given twice", code="invalid_request",
                                 field=key)
        if key in ("limit", "days"):
            if not text.isdigit() or len(text) > 6:
                raise RequestRefused(f"{key} must be a positive integer",
                                     code="invalid_request", field=key)
            params[key] = int(text)
        elif key in NULLABLE:  # an integer, or its spelling of the body's null
            if text == NULLABLE[key]:
                params[key] = None
            elif text.isdigit() and len(text) <= _DIGITS[key]:
                params[key] = int(text)
            else:
                raise RequestRefused(f"{key} must be an integer, or {NULLABLE[key]!r}",
                                     code="invalid_request", field=key)
        elif key == "args":  # a JSON object in the query's text (the socket's is an object)
            try:
                params[key] = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise RequestRefused("args must be a JSON object", code="invalid_request",
                                     field="args") from None
        elif text != "":
            params[key] = text
    return params
