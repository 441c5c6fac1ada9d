"""Envelope rules shared by every message: ``version`` (or legacy ``v``), ``type`` and
``request_id``. Every failure here is connection-fatal (spec/protocol.md §1.6)."""

from __future__ import annotations

from typing import Any

from tay.failures import ConnectionFatal
from tay.protocol.admin_api import SOCKET_TYPES

MAX_IDENTIFIER_BYTES = 128

KNOWN_TYPES = frozenset({
    "hello", "register_tasks", "unregister_tasks", "enqueue", "status", "result", "cancel",
    "started", "succeeded", "failed", "heartbeat", "schedule", "cancel_schedule",
    "register_schedules", "schedules", "schedule_status", "pong", "ping",
}) | frozenset(SOCKET_TYPES)  # the operations API (docs/admin.md)


def is_identifier(value: Any) -> bool:
    """A UTF-8 string of 1..128 bytes without NUL."""
    if type(value) is not str or not value or "\x00" in value:
        return False
    return len(value) <= MAX_IDENTIFIER_BYTES // 4 or len(value.encode("utf-8")) <= MAX_IDENTIFIER_BYTES


def check_envelope(message: dict[str, Any]) -> tuple[str, str]:
    """Return ``(type, request_id)`` or raise the connection-fatal error for the envelope."""
    has_version = "version" in message
    has_v = "v" in message
    version = message["version"] if has_version else message.get("v")
    if has_version and has_v and not _same_version(message["version"], message["v"]):
        raise ConnectionFatal("'version' and 'v' disagree", code="invalid_frame")
    if not _same_version(version, 1):
        raise ConnectionFatal(f"unsupported protocol version {version!r}",
                              code="unsupported_version")
    message_type = message.get("type")
    if type(message_type) is not str:
        raise ConnectionFatal("'type' must be a string", code="invalid_frame")
    if message_type not in KNOWN_TYPES:
        raise ConnectionFatal(f"unknown message type {message_type[:64]!r}",
                              code="unknown_message")
    request_id = message.get("request_id")
    if not is_identifier(request_id):
        raise ConnectionFatal("'request_id' must be a 1..128 byte string without NUL",
                              code="invalid_frame")
    return message_type, request_id


def _same_version(left: Any, right: Any) -> bool:
    # JSON true is not the integer 1, and 1.0 is not an integer either.
    return type(left) is int and type(right) is int and left == right
