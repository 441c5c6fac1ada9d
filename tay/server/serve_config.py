"""``ServeConfig``: everything ``tay serve`` runs with, as the command line
(``tay.server.cli``) validated it. Apart from ``tay.server.app`` so that what reads a
configuration (the command line, the pre-flight checks) needs nothing of what serves it."""

from __future__ import annotations

from tay._frozen import Frozen, set_field
from tay.engine.config import EngineConfig
from tay.protocol.limits import ProtocolLimits
from tay.storage.compaction.trigger import CompactionPolicy
from tay.storage.journal.commit import GATHER_US
from tay.storage.v2.manifest import Retention

from .loop_watch import STALL_MS
from .uds.socket_path import SocketPlan


class ServeConfig(Frozen):
    """Everything ``tay serve`` needs, already validated by the CLI."""

    __slots__ = ("data_dir", "socket", "socket_mode", "init_if_missing", "durability",
                 "validated_filesystem", "group_commit_max_events", "group_commit_interval_ms",
                 "group_commit_linger", "group_commit_gather_us", "journal_writer",
                 "journal_writer_rt_priority", "engine", "limits", "drain_timeout_s",
                 "metrics_port", "terminal_retention", "compaction", "loop_stall_ms")
    data_dir: str
    socket: SocketPlan | None
    socket_mode: int
    init_if_missing: bool
    durability: str
    validated_filesystem: bool
    group_commit_max_events: int
    group_commit_interval_ms: int
    group_commit_linger: bool
    group_commit_gather_us: int  # the longest a batch waits for siblings under load
    journal_writer: str  # "c", "python" or "auto" (C when built)
    journal_writer_rt_priority: int  # 1..99: the C writer thread runs SCHED_FIFO
    engine: EngineConfig
    limits: ProtocolLimits
    drain_timeout_s: float  # SIGTERM waits this long for running executions
    metrics_port: int | None  # a loopback /metrics, /healthz, /readyz listener
    # Store v2 (docs/compaction.md): the retention of a store that has none yet, and the
    # automatic compaction (a v1 store is adopted to Store v2 when compaction is on)
    terminal_retention: Retention
    compaction: CompactionPolicy
    loop_stall_ms: int  # an event-loop beat this late is a stall, logged with where (0: off)

    def __init__(self, data_dir: str, socket: SocketPlan | None, socket_mode: int = 0o600,
                 init_if_missing: bool = False, durability: str = "sync",
                 validated_filesystem: bool = False, group_commit_max_events: int = 1,
                 group_commit_interval_ms: int = 0, group_commit_linger: bool = False,
                 group_commit_gather_us: int = GATHER_US, journal_writer: str = "auto",
                 journal_writer_rt_priority: int = 0,
                 engine: EngineConfig | None = None, limits: ProtocolLimits | None = None,
                 drain_timeout_s: float = 30.0, metrics_port: int | None = None,
                 terminal_retention: Retention | None = None,
                 compaction: CompactionPolicy | None = None,
                 loop_stall_ms: int = STALL_MS) -> None:
        set_field(self, "data_dir", data_dir)
        set_field(self, "socket", socket)
        set_field(self, "socket_mode", socket_mode)
        set_field(self, "init_if_missing", init_if_missing)
        set_field(self, "durability", durability)
        set_field(self, "validated_filesystem", validated_filesystem)
        set_field(self, "group_commit_max_events", group_commit_max_events)
        set_field(self, "group_commit_interval_ms", group_commit_interval_ms)
        set_field(self, "group_commit_linger", group_commit_linger)
        set_field(self, "group_commit_gather_us", group_commit_gather_us)
        set_field(self, "journal_writer", journal_writer)
        set_field(self, "journal_writer_rt_priority", journal_writer_rt_priority)
        # None: the defaults (a fresh value for each config, as the dataclass's factories)
        set_field(self, "engine", EngineConfig() if engine is None else engine)
        set_field(self, "limits", ProtocolLimits() if limits is None else limits)
        set_field(self, "drain_timeout_s", drain_timeout_s)
        set_field(self, "metrics_port", metrics_port)
        set_field(self, "terminal_retention", Retention("hours", 24) if terminal_retention is None
                  else terminal_retention)
        set_field(self, "compaction", CompactionPolicy() if compaction is None else compaction)
        set_field(self, "loop_stall_ms", loop_stall_ms)
