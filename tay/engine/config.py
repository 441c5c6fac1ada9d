"""Engine configuration: queue credits, admission budgets and insert/result limits.

Every field is validated at construction; a bad value raises ``ConfigurationError`` naming
the option. Defaults follow protocol.md Appendix B.
"""

from __future__ import annotations

from tay._frozen import Frozen, set_field
from tay.failures import ConfigurationError
from tay.storage.journal.history_budget import HistoryCaps

KEY_MAX_BYTES = 255


def _check_int(option: str, value: object, low: int, high: int | None = None) -> None:
    if type(value) is not int:
        raise ConfigurationError(option, f"must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ConfigurationError(option, f"must be {bound}, got {value}")


class EngineConfig(Frozen):
    """Validated engine options (all sizes in bytes, all durations in milliseconds)."""

    __slots__ = ("queues", "default_queue_concurrency", "client_slots", "client_bytes",
                 "max_state_bytes", "max_args_bytes", "max_payload_bytes", "max_depth",
                 "max_nodes", "result_bytes", "error_bytes", "default_timeout_ms",
                 "max_tasks_per_connection", "settled_memory", "max_reply_bytes",
                 "max_history_bytes", "max_segments")
    queues: dict[str, int]
    default_queue_concurrency: int
    client_slots: int
    client_bytes: int
    max_state_bytes: int
    max_args_bytes: int
    max_payload_bytes: int
    max_depth: int
    max_nodes: int
    result_bytes: int
    error_bytes: int
    default_timeout_ms: int
    max_tasks_per_connection: int
    settled_memory: int
    # A reply (schedule pages) must fit the transport's frame/body limit (1 MB default).
    max_reply_bytes: int
    # History caps (None: unlimited); enforced once the server attaches a HistoryBudget.
    max_history_bytes: int | None
    max_segments: int | None

    def __init__(self, queues: dict[str, int] | None = None, default_queue_concurrency: int = 10,
                 client_slots: int = 64, client_bytes: int = 64 * 1024 * 1024,
                 max_state_bytes: int = 268_435_456, max_args_bytes: int = 262_144,
                 max_payload_bytes: int = 1_048_576, max_depth: int = 32,
                 max_nodes: int = 10_000, result_bytes: int = 65_536, error_bytes: int = 8_192,
                 default_timeout_ms: int = 30_000, max_tasks_per_connection: int = 256,
                 settled_memory: int = 65_536, max_reply_bytes: int = 1_048_576,
                 max_history_bytes: int | None = None, max_segments: int | None = None) -> None:
        # queues None: {"default": 10}, a new dict for each config
        set_field(self, "queues", {"default": 10} if queues is None else queues)
        set_field(self, "default_queue_concurrency", default_queue_concurrency)
        set_field(self, "client_slots", client_slots)
        set_field(self, "client_bytes", client_bytes)
        set_field(self, "max_state_bytes", max_state_bytes)
        set_field(self, "max_args_bytes", max_args_bytes)
        set_field(self, "max_payload_bytes", max_payload_bytes)
        set_field(self, "max_depth", max_depth)
        set_field(self, "max_nodes", max_nodes)
        set_field(self, "result_bytes", result_bytes)
        set_field(self, "error_bytes", error_bytes)
        set_field(self, "default_timeout_ms", default_timeout_ms)
        set_field(self, "max_tasks_per_connection", max_tasks_per_connection)
        set_field(self, "settled_memory", settled_memory)
        set_field(self, "max_reply_bytes", max_reply_bytes)
        set_field(self, "max_history_bytes", max_history_bytes)
        set_field(self, "max_segments", max_segments)
        self._check()

    def _check(self) -> None:
        if not isinstance(self.queues, dict):
            raise ConfigurationError("queues", "must be a mapping of queue name to credits")
        for name, credits in self.queues.items():
            if type(name) is not str or not 1 <= len(name.encode("utf-8")) <= KEY_MAX_BYTES or "\x00" in name:
                raise ConfigurationError("queues", f"queue name {name!r} must be 1..255 UTF-8 bytes without NUL")
            _check_int(f"queues.{name}", credits, 1)
        _check_int("default_queue_concurrency", self.default_queue_concurrency, 1)
        _check_int("client_slots", self.client_slots, 1)
        _check_int("client_bytes", self.client_bytes, self.client_slots)
        _check_int("max_state_bytes", self.max_state_bytes, 0)
        _check_int("max_args_bytes", self.max_args_bytes, 1)
        _check_int("max_payload_bytes", self.max_payload_bytes, 1)
        _check_int("max_depth", self.max_depth, 1)
        _check_int("max_nodes", self.max_nodes, 1)
        _check_int("result_bytes", self.result_bytes, 1)
        _check_int("error_bytes", self.error_bytes, 1)
        _check_int("default_timeout_ms", self.default_timeout_ms, 1, 86_400_000)
        _check_int("max_tasks_per_connection", self.max_tasks_per_connection, 1)
        _check_int("settled_memory", self.settled_memory, 0)
        _check_int("max_reply_bytes", self.max_reply_bytes, 1024)
        self.history_caps  # validates both caps, naming the option

    @property
    def history_caps(self) -> HistoryCaps:
        """The two history caps, for ``HistoryBudget.for_journal(journal, caps)``."""
        return HistoryCaps(max_history_bytes=self.max_history_bytes,
                           max_segments=self.max_segments, result_bytes=self.result_bytes,
                           error_bytes=self.error_bytes)

    def queue_credits(self, queue: str) -> int:
        """Maximum executing jobs of ``queue`` (configured, else the default)."""
        return self.queues.get(queue, self.default_queue_concurrency)
