"""The HTTP/JSON API, sans-IO: a parsed request becomes a typed route; an engine effect
becomes a response. No sockets and no asyncio here; the listener feeds requests and
performs what comes back.

Routes (seeds/protocol.md "HTTP/JSON producer API", "HTTP workers"; spec/protocol.md §3):
producer calls map to the same engine commands as the Unix socket; worker calls carry a
bearer token that the server resolves to a worker session. Every failure is a JSON
``{"error": {"code": ...}}`` body whose status comes from ``tay.failures.http_status``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

import orjson

from tay.engine.effects import Refuse, Reply
from tay.failures import ConnectionFatal, RequestRefused, TayFailure
from tay.protocol.admin_api import AdminRequest, route_admin
from tay.protocol.envelope import is_identifier
from tay.protocol.limits import ProtocolLimits
from tay.protocol.messages import (
    execution_ids, is_key, parse_failed, parse_succeeded, parse_tasks,
)
from tay.protocol.requests import Failed, Succeeded
from tay.protocol.values import decode_message

DEFAULT_MAX_BODY_BYTES = 1_048_576
MAX_WORKER_CAPACITY = 256
TOKEN_LENGTH = 43
SCHEDULE_PAGE_DEFAULT = 50
SCHEDULE_PAGE_MAX = 100
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")
_ENQUEUE_KEYS = frozenset({"task", "args", "options"})
_WORKER_KEYS = frozenset({"runtime_id", "tasks", "capacity", "queue"})
_JSON_HEADERS = ((b"content-type", b"application/json"),)
_CREATED = frozenset({"enqueued", "scheduled"})  # POST /jobs and POST /schedules: 201


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case bytes, in arrival order."""

    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    version: str = "1.1"  # "1.0", "1.1" or "2"
    peer: str = ""  # who sent it (tay.server.peers.tcp_peer): for the operator's log

    def header_values(self, name: bytes) -> list[bytes]:
        return [value for key, value in self.headers if key == name]


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """Status, body and headers (without framing headers); ``close`` ends the connection."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = _JSON_HEADERS
    close: bool = False


# -- routes: what a request asks the server to do ----------------------------------------
@dataclass(frozen=True, slots=True)
class ProducerCall:
    """An engine command for a producer route: ``kind`` is enqueue/status/cancel/result or a
    schedule command name; ``fields`` are its arguments."""

    kind: str
    fields: dict[str, Any]
    # enqueue: the body bytes, for client admission (--client-bytes); not part of equality
    size: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class RegisterWorker:
    runtime_id: str
    tasks: tuple[str, ...]
    capacity: int
    queue: str


@dataclass(frozen=True, slots=True)
class WorkerCall:
    """A bearer-authenticated call: ``kind`` is claim/started/complete/close. ``report`` is
    the typed execution report for started/complete (``request_id`` filled in later)."""

    kind: str
    token: str
    queue: str | None = None
    report: Any = None


@dataclass(frozen=True, slots=True)
class OpsEndpoint:
    """``GET /metrics``, ``/healthz`` or ``/readyz`` (docs/operations.md)."""

    name: str


OPS_ENDPOINTS = frozenset({"metrics", "healthz", "readyz"})

Route = ProducerCall | RegisterWorker | WorkerCall | AdminRequest | OpsEndpoint | HttpResponse


@dataclass(frozen=True, slots=True)
class HttpApi:
    """Request routing and validation with the listener's limits."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    limits: ProtocolLimits = field(default_factory=ProtocolLimits)
    ops_only: bool = False  # the --metrics-port listener: only /metrics, /healthz, /readyz

    def route(self, request: HttpRequest) -> Route:
        """Map a request to what the server must do; refusals become error responses."""
        try:
            return self._route(request)
        except TayFailure as failure:
            return error_response(failure)

    def _route(self, request: HttpRequest) -> Route:
        path, _, query = origin_target(request).partition("?")
        parts = [unquote(p) for p in path.split("/")[1:]] if path.startswith("/") else None
        if not parts or parts == [""]:
            raise RequestRefused(f"no route for {path[:128]!r}", code="not_found")
        method = request.method
        head, rest = parts[0], parts[1:]
        if head in OPS_ENDPOINTS and not rest:
            _allow(method, ("GET",))
            return OpsEndpoint(head)
        if self.ops_only:
            raise RequestRefused(f"no route for {path[:128]!r} (this listener serves /metrics, "
                                 "/healthz, /readyz)", code="not_found")
        if head == "jobs":
            return self._jobs(request, method, rest)
        if head == "schedules":
            return self._schedules(request, method, rest, query)
        if head == "workers":
            return self._workers(request, method, rest)
        if head == "admin":
            admin = route_admin(method, rest, query)
            if admin is None:
                raise RequestRefused(f"no admin route for {path[:128]!r}", code="not_found")
            if request.body:
                raise RequestRefused("admin requests take no body; options go in the query",
                                     code="invalid_request")
            return admin
        if head == "queues" and len(rest) == 2 and rest[1] == "claim":
            _allow(method, ("POST",))
            return WorkerCall("claim", bearer_token(request), queue=rest[0])
        raise RequestRefused(f"no route for {path[:128]!r}", code="not_found")

    def _jobs(self, request: HttpRequest, method: str, rest: list[str]) -> Route:
        if not rest:
            _allow(method, ("POST",))
            body = self.json_body(request, "POST /jobs")
            unknown = sorted(set(body) - _ENQUEUE_KEYS)
            if unknown:
                raise RequestRefused(f"unknown field {unknown[0]!r}; allowed: task, args, options",
                                     code="invalid_enqueue", field=unknown[0])
            return ProducerCall("enqueue", _enqueue_fields(body), len(request.body))
        job_id = _path_identifier(rest[0], "job id")
        if len(rest) == 1:
            _allow(method, ("GET", "DELETE"))
            return ProducerCall("status" if method == "GET" else "cancel", {"job_id": job_id})
        if len(rest) == 2 and rest[1] == "result":
            _allow(method, ("GET",))
            return ProducerCall("result", {"job_id": job_id})
        raise RequestRefused("no such job route", code="not_found")

    def _schedules(self, request: HttpRequest, method: str, rest: list[str], query: str) -> Route:
        if not rest:
            _allow(method, ("POST", "GET"))
            if method == "POST":
                return ProducerCall("schedule", self.json_body(request, "POST /schedules"))
            return ProducerCall("schedules", schedule_page_query(query))
        if len(rest) != 1:
            raise RequestRefused("no such schedule route", code="not_found")
        schedule_id = _path_identifier(rest[0], "schedule id")
        _allow(method, ("GET", "DELETE"))
        kind = "schedule_status" if method == "GET" else "cancel_schedule"
        return ProducerCall(kind, {"schedule_id": schedule_id})

    def _workers(self, request: HttpRequest, method: str, rest: list[str]) -> Route:
        if not rest:
            _allow(method, ("POST", "DELETE"))
            if method == "DELETE":
                return WorkerCall("close", bearer_token(request))
            return parse_worker_registration(self.json_body(request, "POST /workers"))
        if len(rest) == 1 and rest[0] in ("started", "complete"):
            _allow(method, ("POST",))
            token = bearer_token(request)  # auth before the body: no token, no parsing
            body = self.json_body(request, f"POST /workers/{rest[0]}")
            if rest[0] == "started":
                return WorkerCall("started", token, report=execution_ids(body))
            return WorkerCall("complete", token, report=self.parse_completion(body))
        raise RequestRefused("no such worker route", code="not_found")

    # -- bodies --------------------------------------------------------------------------
    def json_body(self, request: HttpRequest, where: str) -> dict[str, Any]:
        """The body as a JSON object within the value domain, after the media-type check."""
        content_types = request.header_values(b"content-type")
        if len(content_types) != 1 or not is_json_media_type(content_types[0]):
            raise RequestRefused(f"{where} needs exactly one Content-Type: application/json",
                                 code="unsupported_media_type")
        if len(request.body) > self.max_body_bytes:
            raise RequestRefused(f"body of {len(request.body)} bytes exceeds "
                                 f"{self.max_body_bytes}", code="request_too_large")
        if not request.body:
            raise RequestRefused(f"{where}: the body is empty; send a JSON object",
                                 code="invalid_json_object")
        try:
            # the socket's decoder: JSON object, 64-bit integers, value domain, unique keys
            return decode_message(request.body, self.limits)
        except ConnectionFatal as fatal:
            raise RequestRefused(f"{where}: {fatal.message}", code="invalid_json_object") from None

    def parse_completion(self, body: dict[str, Any]) -> Succeeded | Failed:
        """``outcome: success`` with ``result`` or ``outcome: failure`` with ``error``."""
        outcome = body.get("outcome")
        if outcome == "success" and "result" in body:
            return parse_succeeded("", body, self.limits.result_bytes)
        if outcome == "failure" and type(body.get("error")) is dict:
            try:
                return parse_failed("", body, self.limits.error_bytes)
            except RequestRefused as refused:
                if refused.code == "invalid_failure":  # over HTTP this is a bad completion
                    raise RequestRefused(refused.message, code="invalid_completion",
                                         **refused.details) from None
                raise
        raise RequestRefused('complete needs {"outcome":"success","result":...} or '
                             '{"outcome":"failure","error":{...}}', code="invalid_completion")


# -- helpers shared with the server ------------------------------------------------------
def origin_target(request: HttpRequest) -> str:
    """The path and query a request names, after the framing rules of RFC 9112 §3.2.

    HTTP/1.1 needs exactly one Host header. An absolute-form target
    (``http://host:port/jobs``, as proxies send) is served like its path; any other form
    (``*``, ``host:port``) names no resource here."""
    if request.version == "1.1" and len(request.header_values(b"host")) != 1:
        raise RequestRefused("an HTTP/1.1 request needs exactly one Host header",
                             code="invalid_request", field="host")
    target = request.target
    if target.startswith("/"):
        return target
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() in ("http", "https") and rest and not rest.startswith("/"):
        slash, query = rest.find("/"), rest.find("?")
        if slash < 0 or (0 <= query < slash):
            return "/" + rest[query:] if query >= 0 else "/"
        return rest[slash:]
    raise RequestRefused(f"request target {target[:64]!r} is neither a path nor an "
                         "absolute http(s) URL", code="invalid_request", field="target")


def is_json_media_type(value: bytes) -> bool:
    media_type = value.split(b";", 1)[0].strip().lower()
    return media_type == b"application/json"


def bearer_token(request: HttpRequest) -> str:
    """The 43-character token of the single ``Authorization: Bearer`` header."""
    values = request.header_values(b"authorization")
    if len(values) != 1:
        raise RequestRefused("a single Authorization: Bearer <token> header is required",
                             code="unauthorized")
    scheme, _, token = values[0].partition(b" ")
    text = token.decode("latin-1")
    if scheme.lower() != b"bearer" or not _TOKEN.match(text):
        raise RequestRefused("Authorization must be Bearer <43-character token>",
                             code="unauthorized")
    return text


def parse_worker_registration(body: dict[str, Any]) -> RegisterWorker:
    unknown = sorted(set(body) - _WORKER_KEYS)
    if unknown:
        raise RequestRefused(f"unknown field {unknown[0]!r}", code="invalid_worker",
                             field=unknown[0])
    runtime_id = body.get("runtime_id")
    if not is_identifier(runtime_id):
        raise RequestRefused("runtime_id must be a 1..128 byte identifier",
                             code="invalid_worker", field="runtime_id")
    try:
        tasks = parse_tasks(body, 256)
    except RequestRefused as refused:
        raise RequestRefused(refused.message, code="invalid_worker", **refused.details) from None
    capacity = body.get("capacity")
    if type(capacity) is not int or not 1 <= capacity <= MAX_WORKER_CAPACITY:
        raise RequestRefused(f"capacity must be an integer in 1..{MAX_WORKER_CAPACITY}",
                             code="invalid_worker", field="capacity")
    queue = body.get("queue", "default")
    if not is_key(queue):
        raise RequestRefused("queue must be a 1..255 byte key without NUL",
                             code="invalid_worker", field="queue")
    return RegisterWorker(runtime_id, tasks, capacity, queue)


def schedule_page_query(query: str) -> dict[str, Any]:
    """``limit`` 1..100 (default 50) and an optional exclusive ``cursor``."""
    params = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(params) - {"limit", "cursor"})
    if unknown:
        raise RequestRefused(f"unknown query parameter {unknown[0]!r}", code="invalid_request",
                             field=unknown[0])
    page: dict[str, Any] = {"limit": SCHEDULE_PAGE_DEFAULT}
    if "limit" in params:
        text = params["limit"]
        if not text.isdigit() or not 1 <= int(text) <= SCHEDULE_PAGE_MAX:
            raise RequestRefused(f"limit must be an integer in 1..{SCHEDULE_PAGE_MAX}",
                                 code="invalid_request", field="limit")
        page["limit"] = int(text)
    if "cursor" in params:
        if not is_identifier(params["cursor"]):
            raise RequestRefused("cursor must be a 1..128 byte identifier",
                                 code="invalid_request", field="cursor")
        page["cursor"] = params["cursor"]
    return page


def _enqueue_fields(body: dict[str, Any]) -> dict[str, Any]:
    task = body.get("task")
    if not is_key(task):
        raise RequestRefused("task must be a 1..255 byte key without NUL",
                             code="invalid_enqueue", field="task")
    args = body.get("args", {})
    if type(args) is not dict:
        raise RequestRefused("args must be a JSON object", code="invalid_enqueue", field="args")
    options = body.get("options", {})
    if type(options) is not dict:
        raise RequestRefused("options must be a JSON object", code="invalid_enqueue",
                             field="options")
    return {"task": task, "args": args, "options": options}


def _path_identifier(segment: str, what: str) -> str:
    if not is_identifier(segment):
        raise RequestRefused(f"{what} must be a 1..128 byte identifier", code="not_found")
    return segment


def _allow(method: str, allowed: tuple[str, ...]) -> None:
    if method not in allowed:
        raise RequestRefused(f"method {method[:16]} not allowed; use {', '.join(allowed)}",
                             code="method_not_allowed", allow=", ".join(allowed))


# -- responses ---------------------------------------------------------------------------
def error_response(failure: TayFailure, *, close: bool = False) -> HttpResponse:
    body = orjson.dumps({"error": failure.wire_error()})
    headers = _JSON_HEADERS
    if failure.code == "method_not_allowed":
        headers += ((b"allow", str(failure.details.get("allow", "")).encode("latin-1")),)
    return HttpResponse(failure.http_status, body, headers=headers, close=close)


def json_response(status: int, payload: dict[str, Any], max_body_bytes: int) -> HttpResponse:
    """A JSON body, or a 500 ``response_too_large`` if it would exceed the body limit."""
    body = orjson.dumps(payload)
    if len(body) > max_body_bytes:
        return error_response(RequestRefused(
            f"response of {len(body)} bytes exceeds {max_body_bytes}", code="response_too_large"))
    return HttpResponse(status, body)


def effect_response(effect: Reply | Refuse, max_body_bytes: int) -> HttpResponse:
    """The response for a released engine reply: ``type`` plus the reply fields."""
    if isinstance(effect, Refuse):
        return error_response(effect.failure)
    status = 201 if effect.type in _CREATED else 200
    return json_response(status, {"type": effect.type, **effect.fields}, max_body_bytes)


def event_response(message: dict[str, Any], max_body_bytes: int) -> HttpResponse:
    """A claimed ``execute`` / ``cancel_execution`` with its full envelope."""
    return json_response(200, {"version": 1, **message}, max_body_bytes)


NO_CONTENT = HttpResponse(204, b"", headers=())
