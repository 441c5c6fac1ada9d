"""Bounds of Executor Protocol v1, grouped in one value so server, tests and CLI agree.

Defaults follow the upstream engine (spec/protocol.md, Appendix B).
"""

from __future__ import annotations

from tay._frozen import Frozen, set_field
from tay.failures import ConfigurationError

DEFAULT_MAX_FRAME_BYTES = 1_048_576
MAX_FRAME_BYTES_CEILING = 16_777_216


class ProtocolLimits(Frozen):
    """Per-listener protocol bounds. ``validate`` names the first bad option."""

    __slots__ = ("max_frame_bytes", "max_depth", "max_nodes", "max_key_bytes",
                 "max_pending_requests", "max_tasks_per_message", "max_connections", "result_bytes",
                 "error_bytes", "request_timeout_ms", "hello_timeout_ms", "frame_timeout_ms")
    max_frame_bytes: int
    max_depth: int  # counting the envelope object as level 1
    max_nodes: int  # every scalar, array and object of one message
    max_key_bytes: int
    max_pending_requests: int
    max_tasks_per_message: int
    max_connections: int
    result_bytes: int
    error_bytes: int
    request_timeout_ms: int
    hello_timeout_ms: int  # from connect to a parsed hello
    frame_timeout_ms: int  # from a frame's first byte to its last

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, max_depth: int = 32,
                 max_nodes: int = 10_000, max_key_bytes: int = 4_096,
                 max_pending_requests: int = 64, max_tasks_per_message: int = 256,
                 max_connections: int = 128, result_bytes: int = 65_536, error_bytes: int = 8_192,
                 request_timeout_ms: int = 30_000, hello_timeout_ms: int = 10_000,
                 frame_timeout_ms: int = 30_000) -> None:
        set_field(self, "max_frame_bytes", max_frame_bytes)
        set_field(self, "max_depth", max_depth)
        set_field(self, "max_nodes", max_nodes)
        set_field(self, "max_key_bytes", max_key_bytes)
        set_field(self, "max_pending_requests", max_pending_requests)
        set_field(self, "max_tasks_per_message", max_tasks_per_message)
        set_field(self, "max_connections", max_connections)
        set_field(self, "result_bytes", result_bytes)
        set_field(self, "error_bytes", error_bytes)
        set_field(self, "request_timeout_ms", request_timeout_ms)
        set_field(self, "hello_timeout_ms", hello_timeout_ms)
        set_field(self, "frame_timeout_ms", frame_timeout_ms)

    @property
    def buffer_limit(self) -> int:
        """Unread bytes a connection may hold before ``buffer_limit`` closes it."""
        return 2 * self.max_frame_bytes + 8

    def validate(self) -> "ProtocolLimits":
        _bounded("executor_max_frame_bytes", self.max_frame_bytes, 1, MAX_FRAME_BYTES_CEILING)
        _bounded("executor_max_connections", self.max_connections, 1, 4_096)
        _bounded("executor_max_tasks_per_connection", self.max_tasks_per_message, 1, 4_096)
        _bounded("executor_result_bytes", self.result_bytes, 1, self.max_frame_bytes)
        _bounded("executor_error_bytes", self.error_bytes, 1, self.max_frame_bytes)
        _bounded("max_pending_requests", self.max_pending_requests, 1, 65_536)
        _bounded("request_timeout_ms", self.request_timeout_ms, 1, 3_600_000)
        _bounded("hello_timeout_ms", self.hello_timeout_ms, 1, 3_600_000)
        _bounded("frame_timeout_ms", self.frame_timeout_ms, 1, 3_600_000)
        return self


def _bounded(option: str, value: int, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise ConfigurationError(option, f"must be an integer in {low}..{high}, got {value!r}")
