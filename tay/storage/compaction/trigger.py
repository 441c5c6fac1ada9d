"""When a running engine compacts on its own: a size and ratio trigger.

A compaction is due once the history of the store (a v1 store's segments, or the selected
epoch's base and tail) reaches ``history_bytes`` *and* is at least ``ratio`` times the
base the last compaction wrote. After a compaction the history is about the size of the
retained state, so the tail may grow to ``(ratio - 1)`` times it before the next one: with
a bounded terminal retention the store stays within ``ratio`` times the retained window
(plus ``history_bytes``); with nothing to expire the bases grow and compactions space out
geometrically, so rewriting costs O(1) per byte written. A state budget that refuses work
also asks for a compaction (it may free expired jobs), at most once per ``cooldown_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HISTORY_BYTES = 64 * 1024 * 1024
DEFAULT_RATIO = 2.0
MIN_RATIO = 1.1


@dataclass(frozen=True)
class CompactionPolicy:
    enabled: bool = True
    history_bytes: int = DEFAULT_HISTORY_BYTES
    ratio: float = DEFAULT_RATIO
    check_interval_s: float = 2.0
    cooldown_s: float = 60.0

    def __post_init__(self) -> None:
        if type(self.history_bytes) is not int or self.history_bytes < 1:
            raise ValueError(f"history_bytes must be a positive integer, got {self.history_bytes!r}")
        if not isinstance(self.ratio, (int, float)) or not self.ratio >= MIN_RATIO:
            raise ValueError(f"ratio must be at least {MIN_RATIO}, got {self.ratio!r}")

    def due(self, history_bytes: int, last_base_bytes: int) -> bool:
        """Whether the history has grown enough to compact."""
        return (self.enabled and history_bytes >= self.history_bytes
                and history_bytes >= self.ratio * last_base_bytes)
