"""The tay engine: jobs, queues, dispatch, retries, timeouts, cancellation, results, admission.

Synchronous and I/O-free: the server feeds commands and time in and releases the returned
effects after the returned events are durable (docs/engine.md).

The names below load on first use (PEP 562): ``tay serve`` imports ``tay.engine.config``
to build its configuration, and the engine itself (``tay.engine.core``, ~15 ms of imports)
can then load while recovery reads the store on another thread.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tay.engine.commands import (
        Cancel, CancelSchedule, Connect, Disconnect, Enqueue, Failed, ListSchedules,
        RegisterTasks, Result, Schedule, ScheduleStatus, Started, Status, Succeeded,
        UnregisterTasks,
    )
    from tay.engine.config import EngineConfig
    from tay.engine.core import Engine
    from tay.engine.effects import CancelExecution, Execute, Outcome, Refuse, Reply

_COMMANDS = ("Connect", "Disconnect", "RegisterTasks", "UnregisterTasks", "Enqueue", "Status",
             "Result", "Cancel", "Started", "Succeeded", "Failed", "Schedule", "CancelSchedule",
             "ListSchedules", "ScheduleStatus")
_HOME: dict[str, str] = {
    "Engine": "tay.engine.core", "EngineConfig": "tay.engine.config",
    **{name: "tay.engine.effects" for name in ("Outcome", "Reply", "Refuse", "Execute",
                                               "CancelExecution")},
    **{name: "tay.engine.commands" for name in _COMMANDS},
}

__all__ = [
    "Engine", "EngineConfig", "Outcome", "Reply", "Refuse", "Execute", "CancelExecution",
    "Connect", "Disconnect", "RegisterTasks", "UnregisterTasks", "Enqueue", "Status", "Result",
    "Cancel", "Started", "Succeeded", "Failed", "Schedule", "CancelSchedule", "ListSchedules",
    "ScheduleStatus",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'tay.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
