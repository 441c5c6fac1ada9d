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
    size = len(value)
    # an ASCII string has as many bytes as characters; four bytes per character at most
    return size <= MAX_IDENTIFIER_BYTES // 4 or (
        size <= MAX_IDENTIFIER_BYTES and value.isascii()) or \
        len(value.encode("utf-8")) <= MAX_IDENTIFIER_BYTES


def check_envelope(message: dict[str, Any]) -> tuple[str, str]:
    """Return ``(type, request_id)`` or raise the connection-fatal error for the envelope."""
    # every well-formed request takes this one line: ``version`` 1 (an int, not true),
    # no legacy ``v``, a known type and a plain ASCII request id
    version, message_type, request_id = (
        message.get("version"), message.get("type"), message.get("request_id"))
    if (type(version) is int and version == 1 and type(message_type) is str
            and message_type in KNOWN_TYPES and type(request_id) is str
            and 0 < len(request_id) <= MAX_IDENTIFIER_BYTES and request_id.isascii()
            and "\x00" not in request_id and "v" not in message):
        return message_type, request_id
    return _check_envelope_exactly(message)


def _check_envelope_exactly(message: dict[str, Any]) -> tuple[str, str]:
    """The envelope rules one by one, so the error names the first one broken."""
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
