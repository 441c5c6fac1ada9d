"""Configuration of the HTTP listener: ``TAY_HTTP_*`` variables beside the ``tay serve``
flags, the loopback/TLS rules and the server TLS context.

Kept apart from the listener so ``tay`` can read its configuration without importing the
server stack (httptools, the engine, storage). The flags themselves are declared by
``tay.server.cli`` (``add_http_arguments``, their names from ``flag_values``), so a serve
start without an HTTP port does not load this module at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    import ssl

from tay._frozen import Frozen, replace, set_field
from tay.failures import ConfigurationError

from ..flag_values import HTTP_TLS_OPTIONS, http_port_text, parse_int

MAX_BODY_BYTES_CEILING = 16 * 1_048_576
CLAIM_WAIT_S = 20.0
SESSION_IDLE_S = 60.0


class HttpLimits(Frozen):
    __slots__ = ("max_body_bytes", "max_header_bytes", "max_headers", "max_pipeline",
                 "request_timeout_s", "keepalive_timeout_s", "linger_s", "linger_bytes",
                 "h2_max_streams", "claim_wait_s", "session_idle_s")
    max_body_bytes: int
    max_header_bytes: int
    max_headers: int
    max_pipeline: int
    request_timeout_s: float
    keepalive_timeout_s: float
    # after a 413: how long and how much of the abandoned request is read and discarded
    # (after a half-close) so the client can finish sending and read the status
    linger_s: float
    linger_bytes: int
    h2_max_streams: int  # HTTP/2 streams open at once on one connection
    claim_wait_s: float
    session_idle_s: float

    def __init__(self, max_body_bytes: int = 1_048_576, max_header_bytes: int = 16_384,
                 max_headers: int = 100, max_pipeline: int = 16, request_timeout_s: float = 30.0,
                 keepalive_timeout_s: float = 75.0, linger_s: float = 5.0,
                 linger_bytes: int = 16 * 1024 * 1024, h2_max_streams: int = 100,
                 claim_wait_s: float = CLAIM_WAIT_S,
                 session_idle_s: float = SESSION_IDLE_S) -> None:
        set_field(self, "max_body_bytes", max_body_bytes)
        set_field(self, "max_header_bytes", max_header_bytes)
        set_field(self, "max_headers", max_headers)
        set_field(self, "max_pipeline", max_pipeline)
        set_field(self, "request_timeout_s", request_timeout_s)
        set_field(self, "keepalive_timeout_s", keepalive_timeout_s)
        set_field(self, "linger_s", linger_s)
        set_field(self, "linger_bytes", linger_bytes)
        set_field(self, "h2_max_streams", h2_max_streams)
        set_field(self, "claim_wait_s", claim_wait_s)
        set_field(self, "session_idle_s", session_idle_s)


class HttpConfig(Frozen):
    """Where and how to listen; TLS is on when the three files are given."""

    __slots__ = ("ip", "port", "certfile", "keyfile", "cacertfile", "limits", "dashboard")
    ip: str
    port: int
    certfile: str | None
    keyfile: str | None
    cacertfile: str | None
    limits: HttpLimits
    dashboard: bool  # the web UI under /ui/ (docs/dashboard.md); the command line hands it in

    def __init__(self, ip: str = "127.0.0.1", port: int = 0, certfile: str | None = None,
                 keyfile: str | None = None, cacertfile: str | None = None,
                 limits: HttpLimits = HttpLimits(), dashboard: bool = True) -> None:
        set_field(self, "ip", ip)
        set_field(self, "port", port)
        set_field(self, "certfile", certfile)
        set_field(self, "keyfile", keyfile)
        set_field(self, "cacertfile", cacertfile)
        set_field(self, "limits", limits)
        set_field(self, "dashboard", dashboard)

    @property
    def tls(self) -> bool:
        return self.certfile is not None


def http_config_from(args: argparse.Namespace, env: Mapping[str, str]) -> HttpConfig | None:
    """The HTTP configuration, or None when no port is set. Flags win over variables."""
    port_text = http_port_text(args, env)
    if not port_text:
        return None
    port = parse_int("--http-port", port_text, 0, 65_535)
    ip = getattr(args, "http_ip", None) or env.get("TAY_HTTP_IP") or "127.0.0.1"
    import ipaddress  # with HTTP on only: a socket-only start does without it

    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise ConfigurationError("--http-ip", f"{ip!r} is not an IP address") from None
    files = {name: getattr(args, flag[2:].replace("-", "_"), None) or env.get(variable)
             for name, flag, variable in HTTP_TLS_OPTIONS}
    given = [name for name, value in files.items() if value]
    if given and len(given) != 3:
        missing = [flag for name, flag, _ in HTTP_TLS_OPTIONS if not files[name]]
        raise ConfigurationError(missing[0], "TLS needs the certificate, key and client CA")
    if not given and not address.is_loopback:
        raise ConfigurationError("--http-ip", f"{ip} is not loopback: plain HTTP is only "
                                 "allowed on loopback; give all three --http-tls-* files")
    for name, flag, _ in HTTP_TLS_OPTIONS:
        if files[name]:
            _check_pem_path(flag, files[name])
    body_text = getattr(args, "http_max_body_bytes", None) or env.get("TAY_HTTP_MAX_BODY_BYTES")
    limits = HttpLimits()
    if body_text:
        limits = HttpLimits(max_body_bytes=parse_int("--http-max-body-bytes", body_text, 1,
                                                    MAX_BODY_BYTES_CEILING))
    dashboard = getattr(args, "dashboard", None) or env.get("TAY_DASHBOARD") or "on"
    if dashboard not in ("on", "off"):
        raise ConfigurationError("--dashboard", f"must be on or off, got {dashboard[:32]!r}")
    return HttpConfig(str(address), port, files["certfile"], files["keyfile"],
                      files["cacertfile"], limits, dashboard == "on")


def tls_context(config: HttpConfig) -> "ssl.SSLContext":
    """TLS 1.2+, our certificate, and a client certificate required and verified."""
    import ssl  # only when TLS is configured: keeps ``tay serve`` start-up light

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2", "http/1.1"])  # HTTP/2 when the client offers it
    try:
        context.load_cert_chain(config.certfile, config.keyfile)
    except (OSError, ssl.SSLError) as error:
        raise ConfigurationError("--http-tls-certfile", f"cannot load certificate/key: {error}")
    try:
        context.load_verify_locations(cafile=config.cacertfile)
    except (OSError, ssl.SSLError) as error:
        raise ConfigurationError("--http-tls-cacertfile", f"cannot load CA: {error}") from None
    return context


def apply_http(args: argparse.Namespace, env: Mapping[str, str], config: Any) -> tuple[Any, HttpConfig | None]:
    """Enabling HTTP turns off the implicit socket; an explicit path (flag or
    ``TAY_SOCKET_PATH``) keeps both, and ``off`` keeps it off."""
    http = http_config_from(args, env)
    explicit_socket = getattr(args, "socket", None) or env.get("TAY_SOCKET_PATH")
    if http is not None and not explicit_socket and config.socket is not None:
        config = replace(config, socket=None)
    return config, http


def _check_pem_path(option: str, path: str) -> None:
    if not os.path.isabs(path):
        raise ConfigurationError(option, f"{path!r} must be an absolute path")
    if not os.path.isfile(path):
        raise ConfigurationError(option, f"{path} is not a regular file")
