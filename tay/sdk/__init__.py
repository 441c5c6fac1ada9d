"""The tay Python SDK: the public API of tay-client 1.4.0 plus Tay 1.8 schedule reads.

``Tay`` speaks Executor Protocol v1 over the local Unix socket; ``TayHTTP`` and
``TayHTTPWorker`` use the HTTP/JSON API. Import from ``tay`` (``from tay import Tay``).
"""

from tay.errors import (ConnectionLost, ModeError, ProtocolError, RemoteTaskError, ResultTimeout, ResultTooLarge,
                        ServerError, TaskNotRegistered, TaskRegistrationError, TayError, ValidationError)
from tay.sdk.client import Tay
from tay.sdk.handles import HTTPJobHandle, JobHandle, ScheduleHandle, SchedulePage
from tay.sdk.http import TayHTTP
from tay.sdk.http_worker import TayHTTPWorker
from tay.sdk.options import Durability
from tay.sdk.socket_path import resolve_socket_path
from tay.sdk.sync import SyncJobHandle, SyncTay
from tay.sdk.task import Task

__all__ = [
    "ConnectionLost", "Durability", "HTTPJobHandle", "JobHandle", "ModeError", "ProtocolError",
    "RemoteTaskError", "ResultTimeout", "ResultTooLarge", "ScheduleHandle", "SchedulePage", "ServerError", "SyncJobHandle", "SyncTay", "Task",
    "TaskNotRegistered", "TaskRegistrationError", "Tay", "TayError", "TayHTTP", "TayHTTPWorker",
    "ValidationError", "resolve_socket_path",
]
