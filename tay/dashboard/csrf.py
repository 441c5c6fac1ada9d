"""CSRF protection for the dashboard's actions (docs/dashboard.md, "Security").

Every action is a POST carrying a token that this process signed: ``<issued>.<mac>`` with
``mac`` = HMAC-SHA256 over the issue time under a secret drawn at start. A page from
another origin cannot read a token (the same-origin policy), and a token from an earlier
process or older than ``max_age_s`` is refused, so a forged form fails. Two browser
signals are checked as well: an ``Origin`` header that names another host, and
``Sec-Fetch-Site: cross-site`` / ``same-site``, refuse the request before the token is
looked at. Everything that can read a token (a trusted HTTP client) may act anyway, so the
token is not bound to a session: the dashboard has no logins.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from tay.failures import RequestRefused
from tay.protocol.http_api import HttpRequest

MAX_AGE_S = 86_400
_ALLOWED_FETCH_SITES = (b"same-origin", b"none")


def _refuse(message: str) -> RequestRefused:
    return RequestRefused(message, code="csrf_rejected")


class CsrfGuard:
    def __init__(self, secret: bytes | None = None, max_age_s: int = MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.max_age_s = max_age_s
        self._clock = clock

    def issue(self) -> str:
        issued = format(int(self._clock()), "x")
        return f"{issued}.{self._mac(issued)}"

    def check(self, request: HttpRequest, token: str | None) -> None:
        """Refuse (``csrf_rejected``, 403) a cross-site request or a missing, foreign,
        malformed or expired token."""
        _check_origin(request)
        if not token:
            raise _refuse("the form carries no CSRF token; reload the page and try again")
        issued, dot, mac = token.partition(".")
        if not dot or not 1 <= len(issued) <= 12 or not all(
                c in "0123456789abcdef" for c in issued):
            raise _refuse("the CSRF token is malformed; reload the page and try again")
        if not hmac.compare_digest(mac.encode("ascii", "replace"),
                                   self._mac(issued).encode("ascii")):
            raise _refuse("the CSRF token was not issued by this server process (it may have "
                          "restarted); reload the page and try again")
        age = self._clock() - int(issued, 16)
        if not -60 <= age <= self.max_age_s:
            raise _refuse("the page is too old to act from; reload it and try again")

    def _mac(self, issued: str) -> str:
        digest = hmac.new(self._secret, b"tay-ui-csrf:" + issued.encode("ascii"),
                          hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _check_origin(request: HttpRequest) -> None:
    for site in request.header_values(b"sec-fetch-site"):
        if site.strip().lower() not in _ALLOWED_FETCH_SITES:
            raise _refuse("cross-site request refused (Sec-Fetch-Site)")
    origins = request.header_values(b"origin")
    if not origins:
        return  # not a browser, or an old one: the token decides
    hosts = request.header_values(b"host")
    origin = origins[0].decode("latin-1").strip()
    netloc = urlsplit(origin).netloc if origin != "null" else ""
    if len(origins) != 1 or len(hosts) != 1 or not netloc \
            or netloc.lower() != hosts[0].decode("latin-1").strip().lower():
        raise _refuse(f"request from another origin refused ({origin[:100]!r})")
