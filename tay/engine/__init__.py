"""The tay engine: jobs, queues, dispatch, retries, timeouts, cancellation, results, admission.

Synchronous and I/O-free: the server feeds commands and time in and releases the returned
effects after the returned events are durable (docs/engine.md).
"""

from tay.engine.commands import (
    Cancel, CancelSchedule, Connect, Disconnect, Enqueue, Failed, ListSchedules, RegisterTasks,
    Result, Schedule, ScheduleStatus, Started, Status, Succeeded, UnregisterTasks,
)
from tay.engine.config import EngineConfig
from tay.engine.core import Engine
from tay.engine.effects import CancelExecution, Execute, Outcome, Refuse, Reply

__all__ = [
    "Engine", "EngineConfig", "Outcome", "Reply", "Refuse", "Execute", "CancelExecution",
    "Connect", "Disconnect", "RegisterTasks", "UnregisterTasks", "Enqueue", "Status", "Result",
    "Cancel", "Started", "Succeeded", "Failed", "Schedule", "CancelSchedule", "ListSchedules",
    "ScheduleStatus",
]
