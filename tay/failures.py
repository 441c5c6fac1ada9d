"""Every refusal the engine side of tay can give, and the one table that maps it to the wire.

The SDK's public exceptions live in ``tay.errors`` (the same module path as ``tay-client``);
this module is for the engine, storage, protocol and server layers.

Hierarchy:

    TayFailure                    base; carries a wire ``code`` and JSON-safe ``details``
      RequestRefused              a correlated refusal: one request fails, the connection lives
      ConnectionFatal             an uncorrelated protocol error: one error frame, then close
      ConfigurationError          a bad option, flag or environment variable (names the option)
      StorageFailure              the store refused to open or the journal stopped (``unavailable``)
        RecoveryRefused           recovery refused the store; storage was left untouched
        WriterStopped             a write or fsync failed; the writer stopped for good

A code not in ``WIRE_CODES`` is a programming error and raises at construction.
"""

from __future__ import annotations

from typing import Any

# wire code -> HTTP status (None: the code never travels over HTTP).
WIRE_CODES: dict[str, int | None] = {
    # handshake and registration (Unix socket only)
    "hello_required": None,
    "already_hello": None,
    "invalid_hello": None,
    "client_cannot_execute": None,
    "invalid_tasks": None,
    "connection_closed": 503,
    "too_many_requests": 429,
    "request_timeout": 503,
    # producer requests
    "invalid_enqueue": 400,
    "capacity": 429,
    "unknown_outcome": 503,
    "unavailable": 503,
    "invalid_job_id": 400,
    "not_found": 404,
    "cancel_rejected": 400,
    "result_not_ready": 409,
    "result_missing": 410,
    "task_failed": 409,
    "task_cancelled": 409,
    # operations (docs/admin.md)
    "retry_rejected": 409,
    "delete_rejected": 409,
    "compaction_unavailable": 503,
    "compaction_failed": 503,
    # schedules
    "invalid_schedule": 400,
    "schedule_not_found": 404,
    "invalid_schedule_id": 400,
    "schedule_conflict": 409,
    "bulk_scheduling_unsupported": 400,
    # executions
    "invalid_execution": 400,
    "unknown_execution": 400,
    "result_too_large": 400,
    "invalid_failure": 400,
    "error_too_large": 400,
    "invalid_completion": 400,
    # HTTP transport
    "unsupported_request": 400,
    "invalid_request": 400,
    "invalid_json_object": 400,
    "unsupported_media_type": 415,
    "request_too_large": 413,
    "response_too_large": 500,
    "method_not_allowed": 405,
    "internal": 500,
    "unauthorized": 401,
    "unknown_worker": 401,
    "wrong_queue": 409,
    "invalid_worker": 400,
    "claim_in_progress": 400,
    # the dashboard (docs/dashboard.md)
    "csrf_rejected": 403,
    # connection-fatal (Unix socket, uncorrelated)
    "frame_too_large": None,
    "malformed_json": None,
    "unsupported_version": None,
    "unknown_message": None,
    "invalid_frame": None,
    "buffer_limit": None,
    "hello_timeout": None,  # no hello within --hello-timeout-ms of connecting
    "frame_timeout": None,  # a frame not completed within --frame-timeout-ms
    "connection_limit": None,  # closed to make room: no hello yet when the limit was reached
}


def http_status(code: str) -> int:
    """The HTTP status for a wire code; codes that never travel over HTTP map to 400."""
    status = WIRE_CODES[code]
    return 400 if status is None else status


class TayFailure(Exception):
    """Base class: a refusal with a wire code and JSON-safe diagnostic details."""

    default_code = "internal"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        code = code or self.default_code
        if code not in WIRE_CODES:
            raise ValueError(f"unknown wire code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def wire_error(self) -> dict[str, Any]:
        """The ``error`` object sent on the wire: the code, then public details."""
        error: dict[str, Any] = {"code": self.code}
        for key, value in self.details.items():
            if value is not None:
                error[key] = value
        if self.message and "message" not in error:
            error["message"] = self.message
        return error

    @property
    def http_status(self) -> int:
        return http_status(self.code)


class RequestRefused(TayFailure):
    """One request is refused; the connection stays open."""

    default_code = "invalid_request"


class ConnectionFatal(TayFailure):
    """A frame or envelope error: send one uncorrelated error, then close the connection."""

    default_code = "invalid_frame"


class ConfigurationError(TayFailure):
    """A bad option, flag or environment variable. The message names the option."""

    default_code = "invalid_request"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}", option=option)
        self.option = option


class StorageFailure(TayFailure):
    """The store cannot serve: maps to ``unavailable`` on the wire.

    ``kind`` is one of the fixed recovery error kinds of docs/storage-format.md
    (for example ``physical_corruption`` or ``incomplete_tail``); ``reason`` is the nested
    physical class (for example ``record_checksum``).
    """

    default_code = "unavailable"

    def __init__(
        self,
        kind: str,
        reason: str,
        *,
        path: str | None = None,
        offset: int | None = None,
        sequence: int | None = None,
        segment_id: int | None = None,
        stage: str | None = None,
        **extra: Any,
    ) -> None:
        where = ", ".join(
            f"{name} {value}"
            for name, value in (("path", path), ("offset", offset), ("sequence", sequence))
            if value is not None
        )
        message = f"{kind}: {reason}" + (f" ({where})" if where else "")
        if extra.get("remedy"):  # what the operator can do about it, e.g. a command to run
            message += f"; {extra['remedy']}"
        super().__init__(message, kind=kind, reason=reason)
        self.kind = kind
        self.reason = reason
        self.path = path
        self.offset = offset
        self.sequence = sequence
        self.segment_id = segment_id
        self.stage = stage
        self.extra = extra

    def report(self) -> dict[str, Any]:
        """Everything known about the refusal, for logs, ``inspect`` and ``verify-file``."""
        out: dict[str, Any] = {"class": self.kind, "reason": self.reason}
        for name in ("path", "offset", "sequence", "segment_id", "stage"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extra)
        return out


class RecoveryRefused(StorageFailure):
    """Recovery refused the store. Nothing on disk was changed (action preserve_and_stop)."""


class WriterStopped(StorageFailure):
    """A write or fsync failed: the journal stopped for good and fails every pending ack."""
