"""A flag's (or its environment variable's) text read as a value, refused under the flag's
name: shared by the ``tay serve`` command line (``tay.server.cli``) and the configurations
it reads only when they are used (``tay.server.http.config``, ``tay.server.compaction.config``),
which need nothing else of the command line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tay._frozen import LazyPattern
from tay.failures import ConfigurationError

if TYPE_CHECKING:
    import argparse

_SIZE = LazyPattern(r"^\s*(\d+)\s*(KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNITS = {None: 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

# the HTTP listener's TLS files: (HttpConfig field, flag, variable)
HTTP_TLS_OPTIONS = (("certfile", "--http-tls-certfile", "TAY_HTTP_TLS_CERTFILE"),
                    ("keyfile", "--http-tls-keyfile", "TAY_HTTP_TLS_KEYFILE"),
                    ("cacertfile", "--http-tls-cacertfile", "TAY_HTTP_TLS_CACERTFILE"))


def http_port_text(args: argparse.Namespace, env: Mapping[str, str]) -> Any:
    """The HTTP port as given (flag, else ``TAY_HTTP_PORT``); empty or None: HTTP is off."""
    return getattr(args, "http_port", None) or env.get("TAY_HTTP_PORT")


def parse_size(option: str, text: str) -> int:
    """``text`` as bytes: an integer with an optional KB/MB/GB/KiB/MiB/GiB suffix."""
    text = str(text)
    if text.isascii() and text.isdigit():  # plain bytes (every start's default): no pattern
        return int(text)
    match = _SIZE.match(text)
    if match is None:
        raise ConfigurationError(option, f"{text!r} must be an integer with an optional "
                                         "KB/MB/GB/KiB/MiB/GiB suffix")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(option: str, text: Any, low: int, high: int) -> int:
    """``text`` as a base-10 integer within ``low..high``, refused under ``option``'s name."""
    try:
        value = int(str(text), 10)
    except ValueError:
        raise ConfigurationError(option, f"{text!r} is not an integer") from None
    if not low <= value <= high:
        raise ConfigurationError(option, f"must be {low}..{high}, got {value}")
    return value
