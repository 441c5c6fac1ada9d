"""The SDK's public exceptions: the same names, bases and constructor signatures as
``tay-client`` 1.4.0, so code that catches them keeps working unchanged.

The engine side has its own hierarchy in ``tay.failures``; nothing here is raised by the
engine, and nothing there reaches SDK callers except as a ``ServerError`` code.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConnectionLost",
    "ModeError",
    "ProtocolError",
    "RemoteTaskError",
    "ResultTimeout",
    "ResultTooLarge",
    "ServerError",
    "TaskNotRegistered",
    "TaskRegistrationError",
    "TayError",
    "ValidationError",
]


class TayError(Exception):
    """Root of every exception the SDK raises on purpose."""


class ValidationError(TayError, ValueError):
    """An argument was refused before anything was sent; the message names it."""


class ProtocolError(TayError):
    """The server sent something the protocol does not allow (the message says what)."""


class ConnectionLost(TayError, ConnectionError):
    """No reply arrived because the connection closed or the request timed out.

    The outcome of the request is unknown: an ``enqueue`` may have been accepted. Retry it
    only with the same ``submission_id`` (and the same definition) so the server can
    reconcile it instead of creating a second job.
    """


class ServerError(TayError):
    """The server refused a request; ``code`` is the wire code, ``details`` its error object."""

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class RemoteTaskError(ServerError):
    """The job's task failed on its final attempt, so it has no result to return.

    ``failure`` is what the worker reported for that attempt (``type``, ``message`` and
    ``traceback``, each when sent), also in ``details["failure"]``; None when the job timed
    out or the engine kept no details.
    """

    @property
    def failure(self) -> dict[str, str] | None:
        failure = self.details.get("failure") if isinstance(self.details, dict) else None
        return dict(failure) if isinstance(failure, dict) else None

    @property
    def remote_type(self) -> str | None:
        return (self.failure or {}).get("type")

    @property
    def remote_message(self) -> str | None:
        return (self.failure or {}).get("message")

    @property
    def remote_traceback(self) -> str | None:
        return (self.failure or {}).get("traceback")


class TaskRegistrationError(TayError):
    """A task name is invalid, unknown here, or already bound to a different callable."""


class TaskNotRegistered(TayError):
    """The server asked this process to run a task it never registered."""


class ResultTooLarge(ValidationError):
    """A task returned a value whose JSON encoding exceeds the result size limit."""


class ModeError(TayError):
    """The call is not available in this client's mode (for example enqueue in worker mode)."""


class ResultTimeout(TayError, TimeoutError):
    """``job.result(timeout=...)`` ran out of time while the job was still pending.

    Nothing changed on the server: the job keeps its place and may still complete; ask
    again later, or ``cancel()`` it.
    """

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id
