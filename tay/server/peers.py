"""Who is at the other end of a connection, in a few words for the operator's log (an
admin action names where it came from: docs/admin.md, "Operator actions")."""

from __future__ import annotations

import socket
import struct
from typing import Any

_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def unix_peer(transport: Any) -> str:
    """``pid P uid U`` of a Unix-socket peer (SO_PEERCRED), or ``unix`` when unknown."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        pid, uid, _ = _CREDENTIALS.unpack(sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    except (AttributeError, OSError, struct.error):
        return "unix"
    return f"pid {pid} uid {uid}"


def tcp_peer(transport: Any) -> str:
    """``host:port`` of a TCP peer, and the client certificate's CN under mTLS."""
    address = transport.get_extra_info("peername") if transport is not None else None
    if not address:
        text = "unknown"
    elif ":" in address[0]:
        text = f"[{address[0]}]:{address[1]}"
    else:
        text = f"{address[0]}:{address[1]}"
    tls = transport.get_extra_info("ssl_object") if transport is not None else None
    certificate = tls.getpeercert() if tls is not None else None
    for names in (certificate or {}).get("subject", ()):
        for key, value in names:
            if key == "commonName":
                return f"{text} CN={value}"
    return text
