"""tay: a durable, single-node background-job engine with a C core.

The package also carries the Python SDK with the public API of ``tay-client`` 1.4.0
(``from tay import Tay``). The SDK names are loaded lazily on first access, so engine-side
code that imports ``tay.storage`` or ``tay.engine`` never pulls in the SDK.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_SDK_NAMES = frozenset({
    "ConnectionLost", "Durability", "HTTPJobHandle", "JobHandle", "ModeError", "ProtocolError",
    "RemoteTaskError", "ResultTooLarge", "ScheduleHandle", "SchedulePage", "ServerError", "Task",
    "TaskNotRegistered", "TaskRegistrationError", "Tay", "TayError", "TayHTTP", "TayHTTPWorker",
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
