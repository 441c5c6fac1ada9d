"""The dashboard's HTTP side: routes under ``/ui/``, page rendering, headers, static files.

``Dashboard.handle(request)`` answers one request of the HTTP listener whose path is
``/ui`` or below it. Pages (``pages``) and actions (``actions``) read and act only through
the operations API: the ``admin_call`` given at construction is ``AdminService.call``, the
same entry both transports use, so every page shows only durable state and every action is
answered only once its events are durable. Rendering is synchronous Jinja2 on the event
loop, so templates are compiled once at start and pages stay small (50 rows at most).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

import jinja2

from tay._version import __version__
from tay.failures import RequestRefused, TayFailure
from tay.protocol.http_api import HttpRequest, HttpResponse, origin_target

from . import actions, pages
from .csrf import CsrfGuard
from .format import FILTERS, HELPERS
from .view import PREFIX, AdminCall, AdminFailed, Page, View, redirect

log = logging.getLogger("tay.dashboard")

MAX_QUERY_VALUE = 1_024
_CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_PAGE_HEADERS = (
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy", _CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
)
_STATIC_TYPES = {".css": b"text/css; charset=utf-8", ".js": b"text/javascript; charset=utf-8"}
STATIC_FILES = ("tay.css", "htmx.min.js")

# (method, path pattern under /ui/, handler); "*" matches one non-empty segment
ROUTES: tuple[tuple[str, tuple[str, ...], Callable[..., Any]], ...] = (
    ("GET", ("",), pages.overview),
    ("GET", ("jobs",), pages.jobs),
    ("GET", ("find",), pages.find),
    ("GET", ("jobs", "*"), pages.job),
    ("POST", ("jobs", "*", "retry"), actions.retry_job),
    ("POST", ("jobs", "*", "cancel"), actions.cancel_job),
    ("GET", ("jobs", "*", "delete"), pages.delete_job_confirm),
    ("POST", ("jobs", "*", "delete"), actions.delete_job),
    ("GET", ("retry",), pages.retry_confirm),
    ("POST", ("retry",), actions.retry_jobs),
    ("GET", ("cancel",), pages.cancel_confirm),
    ("POST", ("cancel",), actions.cancel_jobs),
    ("GET", ("delete",), pages.delete_confirm),
    ("POST", ("delete",), actions.delete_jobs),
    ("GET", ("queues",), pages.queues),
    ("GET", ("queues", "*", "purge"), pages.purge_confirm),
    ("POST", ("queues", "*", "purge"), actions.purge_queue),
    ("POST", ("workers", "*", "quiet"), actions.quiet_worker),
    ("POST", ("workers", "*", "unquiet"), actions.unquiet_worker),
    ("POST", ("queues", "*", "pause"), actions.pause_queue),
    ("POST", ("queues", "*", "resume"), actions.resume_queue),
    ("GET", ("queues", "*", "scale"), pages.scale_form),
    ("POST", ("queues", "*", "scale"), actions.scale_queue),
    ("GET", ("queues", "*", "limit"), pages.limit_form),
    ("POST", ("queues", "*", "limit"), actions.limit_queue),
    ("GET", ("history",), pages.history),
    ("GET", ("schedules",), pages.schedules),
    ("GET", ("schedules", "*"), pages.schedule),
    ("POST", ("schedules", "*", "cancel"), actions.cancel_schedule),
    ("POST", ("schedules", "*", "run"), actions.run_schedule),
    ("POST", ("schedules", "*", "pause"), actions.pause_schedule),
    ("POST", ("schedules", "*", "resume"), actions.resume_schedule),
    ("GET", ("workers",), pages.workers),
    ("GET", ("tasks",), pages.tasks),
    ("GET", ("storage",), pages.storage),
    ("POST", ("storage", "compact"), actions.compact),
)


class Dashboard:
    def __init__(self, admin_call: AdminCall, *, csrf: CsrfGuard | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.admin_call = admin_call
        self.csrf = csrf or CsrfGuard(clock=clock)
        self.clock = clock
        self.static = _load_static()
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("tay.dashboard", "templates"),
            autoescape=True, auto_reload=False, undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(FILTERS)
        self.env.filters["url"] = lambda text: quote(str(text), safe="")
        self.env.globals.update(static_url=self.static_url, version=__version__, **HELPERS)
        for name in self.env.list_templates():  # compile now, not on a first request
            self.env.get_template(name)

    def static_url(self, name: str) -> str:
        return f"{PREFIX}/static/{name}?v={self.static[name][1]}"

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one ``/ui`` request; never raises."""
        started = time.perf_counter()
        try:
            return await self._handle(request, started)
        except TayFailure as failure:  # no route, a bad form, a refused CSRF check
            return self._error_page(failure, started)
        except Exception as error:  # a page bug must not leave the browser without an answer
            log.error("dashboard %s %s failed", request.method, request.target[:200],
                      exc_info=error)
            return self._error_page(RequestRefused("internal error", code="internal"), started)

    async def _handle(self, request: HttpRequest, started: float) -> HttpResponse:
        path, _, query_text = request.target.partition("?")
        origin_target(request)  # HTTP/1.1 framing rules: exactly one Host header
        if path == PREFIX:
            return redirect(f"{PREFIX}/")
        parts = [unquote(part) for part in path[len(PREFIX) + 1:].split("/")]
        if parts[0] == "static" and len(parts) == 2:
            _allow(request.method, "GET")
            return self._static(parts[1], query_text)
        handler, params = _match(request.method, parts)
        view = View(self.admin_call, request, path, _query(query_text),
                    int(self.clock() * 1000))
        if request.method == "POST":
            view.form = _form(request)
            self.csrf.check(request, view.form.get("csrf"))
        try:
            result = await handler(view, *params)
        except AdminFailed as failed:
            result = self._refused_page(view, failed.failure)
        if isinstance(result, HttpResponse):
            return result
        return self.render(result, view, started)

    def render(self, page: Page, view: View, started: float) -> HttpResponse:
        gathered = time.perf_counter()
        context = {"csrf_token": self.csrf.issue(), "now_ms": view.now_ms, "path": view.path,
                   "query": view.query, "status": None, "notice": None, "section": None,
                   **page.context}
        body = self.env.get_template(page.template).render(context).encode("utf-8")
        done = time.perf_counter()
        timing = (f"admin;dur={(gathered - started) * 1000:.2f}, "
                  f"render;dur={(done - gathered) * 1000:.2f}").encode("ascii")
        return HttpResponse(page.status, body, _PAGE_HEADERS + ((b"server-timing", timing),))

    def _refused_page(self, view: View, failure: TayFailure) -> Page:
        return Page("refused.html", {"failure": failure, "back": view.back},
                    failure.http_status)

    def _error_page(self, failure: TayFailure, started: float) -> HttpResponse:
        """An error before any page could be built; plain text if even that fails."""
        view = View(self.admin_call, HttpRequest("GET", PREFIX + "/"), PREFIX + "/", {},
                    int(self.clock() * 1000))
        extra: tuple[tuple[bytes, bytes], ...] = ()
        if failure.code == "method_not_allowed":
            extra = ((b"allow", str(failure.details.get("allow", "")).encode("latin-1")),)
        try:
            response = self.render(Page("refused.html", {"failure": failure,
                                                         "back": PREFIX + "/"},
                                        failure.http_status), view, started)
        except Exception as error:
            log.error("dashboard error page failed", exc_info=error)
            return HttpResponse(failure.http_status, failure.message.encode("utf-8"),
                                ((b"content-type", b"text/plain; charset=utf-8"),
                                 (b"cache-control", b"no-store")) + extra)
        return HttpResponse(response.status, response.body, response.headers + extra)

    def _static(self, name: str, query_text: str) -> HttpResponse:
        found = self.static.get(name)
        if found is None:
            raise RequestRefused(f"no static file {name[:64]!r}", code="not_found")
        body, version, content_type = found
        versioned = dict(parse_qsl(query_text)).get("v") == version
        cache = b"public, max-age=31536000, immutable" if versioned else b"no-cache"
        return HttpResponse(200, body, ((b"content-type", content_type),
                                        (b"cache-control", cache),
                                        (b"x-content-type-options", b"nosniff")))


def _match(method: str, parts: list[str]) -> tuple[Callable[..., Any], list[str]]:
    allowed: list[str] = []
    for route_method, pattern, handler in ROUTES:
        if len(pattern) != len(parts):
            continue
        params = []
        for segment, part in zip(pattern, parts):
            if segment == "*":
                if not part:
                    break
                params.append(part)
            elif segment != part:
                break
        else:
            if method == route_method or (method == "HEAD" and route_method == "GET"):
                return handler, params
            allowed.append(route_method)
    if allowed:
        raise RequestRefused(f"method {method[:16]} not allowed here; use {', '.join(allowed)}",
                             code="method_not_allowed", allow=", ".join(allowed))
    raise RequestRefused("no such dashboard page", code="not_found")


def _allow(method: str, allowed: str) -> None:
    if method not in (allowed, "HEAD"):
        raise RequestRefused(f"method {method[:16]} not allowed here; use {allowed}",
                             code="method_not_allowed", allow=allowed)


def _query(text: str) -> dict[str, str]:
    """Query parameters (first value wins), each cut to a sane length."""
    params: dict[str, str] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        params.setdefault(key[:64], value[:MAX_QUERY_VALUE])
    return params


def _form(request: HttpRequest) -> dict[str, str]:
    types = request.header_values(b"content-type")
    if request.body and (len(types) != 1 or types[0].split(b";")[0].strip().lower()
                         != b"application/x-www-form-urlencoded"):
        raise RequestRefused("dashboard actions take a form body "
                             "(application/x-www-form-urlencoded)",
                             code="unsupported_media_type")
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestRefused("the form body is not UTF-8", code="invalid_request") from None
    return _query(text)


def _load_static() -> dict[str, tuple[bytes, str, bytes]]:
    """name -> (bytes, short content hash for cache busting, content type)."""
    files = {}
    folder = resources.files("tay.dashboard") / "static"
    for name in STATIC_FILES:
        body = (folder / name).read_bytes()
        content_type = _STATIC_TYPES[name[name.rindex("."):]]
        files[name] = (body, hashlib.sha256(body).hexdigest()[:12], content_type)
    return files
