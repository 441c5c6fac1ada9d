"""tay: a durable, single-node background-job engine with a C core.

The package also carries the Python SDK with the public API of ``tay-client`` 1.4.0
(``from tay import Tay``) and a few additions (docs/sdk.md). The SDK names are loaded on
first access, so engine-side code that imports ``tay.storage`` or ``tay.engine`` never
pulls in the SDK; type checkers see the real classes through the imports below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real classes for type checkers (`X as X`: an explicit re-export)
    from tay.errors import (
        ConnectionLost as ConnectionLost,
        ModeError as ModeError,
        ProtocolError as ProtocolError,
        RemoteTaskError as RemoteTaskError,
        ResultTimeout as ResultTimeout,
        ResultTooLarge as ResultTooLarge,
        ServerError as ServerError,
        TaskNotRegistered as TaskNotRegistered,
        TaskRegistrationError as TaskRegistrationError,
        TayError as TayError,
        ValidationError as ValidationError,
    )
    from tay.sdk.client import (
        Tay as Tay,
    )
    from tay.sdk.handles import (
        HTTPJobHandle as HTTPJobHandle,
        JobHandle as JobHandle,
        ScheduleHandle as ScheduleHandle,
        SchedulePage as SchedulePage,
    )
    from tay.sdk.http import (
        TayHTTP as TayHTTP,
    )
    from tay.sdk.http_worker import (
        TayHTTPWorker as TayHTTPWorker,
    )
    from tay.sdk.options import (
        Durability as Durability,
    )
    from tay.sdk.sync import (
        SyncJobHandle as SyncJobHandle,
        SyncTay as SyncTay,
    )
    from tay.sdk.socket_path import (
        resolve_socket_path as resolve_socket_path,
    )
    from tay.sdk.task import (
        Task as Task,
    )

from tay._version import __version__ as __version__

_SDK_NAMES = frozenset({
    "ConnectionLost", "Durability", "HTTPJobHandle", "JobHandle", "ModeError", "ProtocolError",
    "RemoteTaskError", "ResultTimeout", "ResultTooLarge", "ScheduleHandle", "SchedulePage", "ServerError",
    "SyncJobHandle", "SyncTay", "Task", "TaskNotRegistered", "TaskRegistrationError", "Tay", "TayError", "TayHTTP", "TayHTTPWorker",
    "ValidationError", "resolve_socket_path",
})

__all__ = sorted(_SDK_NAMES - {"SchedulePage"})


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        import tay.sdk

        value = getattr(tay.sdk, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SDK_NAMES)
