"""When a running engine compacts on its own: a size and ratio trigger.

A compaction is due once the history of the store (a v1 store's segments, or the selected
epoch's base and tail) reaches ``history_bytes`` *and* is at least ``ratio`` times the
base the last compaction wrote. After a compaction the history is about the size of the
retained state, so the tail may grow to ``(ratio - 1)`` times it before the next one: with
a bounded terminal retention the store stays within ``ratio`` times the retained window
(plus ``history_bytes``); with nothing to expire the bases grow and compactions space out
geometrically, so rewriting costs O(1) per byte written. A state budget that refuses work
also asks for a compaction (it may free expired jobs), at most once per ``cooldown_s``.

The state trigger compacts *before* the budget refuses: a reference job charges about 3.5
times the state budget it writes to the history, so with a busy retention window the budget
(``max_state_bytes``) fills long before the history trigger fires. Once the retained state
reaches ``state_ratio`` of the budget, a compaction is due if the terminal jobs whose
retention has passed hold at least a quarter of the state (``STATE_RELEASE_SHARE``: a
compaction rewrites all that is retained, so it must free a fair share of it; never less
than ``STATE_RELEASE_FRACTION`` of the budget), or anything at all once less than
``STATE_HEADROOM_FRACTION`` of the budget is left (at most once per ``cooldown_s``). The
server decides what could be released; ``state_due`` is the rule.

The retention trigger bounds how long a finished job outlives its retention when neither
size nor state calls for a compaction (a quiet store: at a few thousand jobs a day the
64 MiB history takes weeks to fill, and every finished job stays that long). A compaction
is due once the oldest terminal job has been past its retention for ``retention_slack_ms``:
half the retention, at least an hour. So a finished job is gone by 1.5 times its
retention (at least retention plus an hour), and each compaction it triggers rewrites at
most that window: a job is rewritten about three times in its life. At most one such
compaction per slack, whatever it expired.

The dead-tail trigger bounds a restart's replay when the tail is mostly records of jobs no
longer retained: an operator who deletes the finished jobs by hand leaves no terminal job
for the retention trigger, and the history trigger waits for 64 MiB. A compaction is due
once the epoch's tail reaches ``DEAD_TAIL_MIN_BYTES`` and ``DEAD_TAIL_RATIO`` times the
retained state's charge: it rewrites little (the retained state) and leaves a restart a
small base instead of the tail.
"""

from __future__ import annotations

import os

from collections.abc import Callable

from tay._frozen import Frozen, set_field

DEFAULT_HISTORY_BYTES = 64 * 1024 * 1024
DEFAULT_RATIO = 2.0
MIN_RATIO = 1.1
DEFAULT_STATE_RATIO = 0.5
MIN_STATE_RATIO = 0.05
MAX_STATE_RATIO = 0.95
STATE_RELEASE_FRACTION = 1 / 16  # of max_state_bytes: 16 MiB of the 256 MiB default
STATE_RELEASE_SHARE = 1 / 4  # of the retained state: what a rewrite must free at least
STATE_HEADROOM_FRACTION = 1 / 8  # of max_state_bytes: below this much left, anything will do
# the state trigger's back-off after a look that found too little to release: look again
# once the state grew by this fraction of the budget, the earliest terminal job expires,
# or (something is releasable already, but little) after STATE_RESCAN_MS
STATE_GROWTH_FRACTION = 1 / 64
STATE_RESCAN_MS = 30_000
# --compact-on-stop: a clean stop compacts once the epoch's tail holds at least this many
# bytes and this share of the base (a tail record costs a restart about twice a base one;
# a tail much smaller than the base is not worth rewriting the whole base for)
STOP_MIN_TAIL_BYTES = 4096
STOP_TAIL_SHARE = 1 / 16
# the dead-tail trigger: an epoch's tail of at least this many bytes, and at least this
# many times the retained state's charge, is mostly the records of jobs gone by hand
# (an operator's deletions keep the retention trigger from ever firing) or of no job
DEAD_TAIL_MIN_BYTES = 8 * 1024 * 1024
DEAD_TAIL_RATIO = 8
# the retention trigger: how long the oldest terminal job may stay past its retention
RETENTION_SLACK_SHARE = 1 / 2  # of the retention
RETENTION_SLACK_MIN_MS = 3_600_000


def retention_slack_ms(retention_ms: int) -> int:
    """How long past its retention the oldest terminal job may stay before it is due."""
    return max(int(retention_ms * RETENTION_SLACK_SHARE), RETENTION_SLACK_MIN_MS)


class CompactionPolicy(Frozen):
    __slots__ = ("enabled", "history_bytes", "ratio", "state_ratio", "check_interval_s",
                 "cooldown_s", "on_stop")
    enabled: bool
    history_bytes: int
    ratio: float
    state_ratio: float
    check_interval_s: float
    cooldown_s: float
    on_stop: bool  # --compact-on-stop: a clean stop leaves a compacted epoch

    def __init__(self, enabled: bool = True, history_bytes: int = DEFAULT_HISTORY_BYTES,
                 ratio: float = DEFAULT_RATIO, state_ratio: float = DEFAULT_STATE_RATIO,
                 check_interval_s: float = 2.0, cooldown_s: float = 60.0,
                 on_stop: bool = False) -> None:
        set_field(self, "enabled", enabled)
        set_field(self, "history_bytes", history_bytes)
        set_field(self, "ratio", ratio)
        set_field(self, "state_ratio", state_ratio)
        set_field(self, "check_interval_s", check_interval_s)
        set_field(self, "cooldown_s", cooldown_s)
        set_field(self, "on_stop", on_stop)
        if type(self.history_bytes) is not int or self.history_bytes < 1:
            raise ValueError(f"history_bytes must be a positive integer, got {self.history_bytes!r}")
        if not isinstance(self.ratio, (int, float)) or not self.ratio >= MIN_RATIO:
            raise ValueError(f"ratio must be at least {MIN_RATIO}, got {self.ratio!r}")
        if not isinstance(self.state_ratio, (int, float)) or not (
                MIN_STATE_RATIO <= self.state_ratio <= MAX_STATE_RATIO):
            raise ValueError(f"state_ratio must be between {MIN_STATE_RATIO} and "
                             f"{MAX_STATE_RATIO}, got {self.state_ratio!r}")

    def due(self, history_bytes: int, last_base_bytes: int) -> bool:
        """Whether the history has grown enough to compact."""
        return (self.enabled and history_bytes >= self.history_bytes
                and history_bytes >= self.ratio * last_base_bytes)

    def dead_tail_due(self, history_bytes: int, last_base_bytes: int,
                      retained_bytes: int) -> bool:
        """Whether the epoch's tail is mostly records of nothing retained: at least
        ``DEAD_TAIL_MIN_BYTES`` and ``DEAD_TAIL_RATIO`` times ``retained_bytes`` (the state
        budget's charge of the retained jobs, which a compaction rewrites)."""
        tail = history_bytes - last_base_bytes
        return (self.enabled and tail >= DEAD_TAIL_MIN_BYTES
                and tail >= DEAD_TAIL_RATIO * retained_bytes)

    def stop_due(self, history_bytes: int, last_base_bytes: int) -> bool:
        """Whether a clean stop compacts (``on_stop``), so that the next start replays a
        base of snapshots instead of the tail's records."""
        tail = history_bytes - last_base_bytes
        return (self.enabled and self.on_stop and tail >= STOP_MIN_TAIL_BYTES
                and tail >= STOP_TAIL_SHARE * last_base_bytes)

    def state_pressed(self, used: int, limit: int) -> bool:
        """Whether the retained state passed ``state_ratio`` of the budget."""
        return self.enabled and used >= self.state_ratio * limit

    def state_due(self, used: int, limit: int, releasable: int) -> bool:
        """Whether a compaction that releases ``releasable`` charged bytes (terminal jobs
        past their retention) is worth running at ``used`` of ``limit``."""
        if not self.state_pressed(used, limit) or releasable <= 0:
            return False
        return releasable >= self.state_worth(used, limit) or \
            limit - used < STATE_HEADROOM_FRACTION * limit

    @staticmethod
    def state_worth(used: int, limit: int) -> float:
        """What a compaction must release to be worth its rewrite without the limit near."""
        return max(STATE_RELEASE_FRACTION * limit, STATE_RELEASE_SHARE * used)


# (releasable state bytes at a time, when the earliest other terminal job expires or None)
Releasable = Callable[[int], "tuple[int, int | None]"]


class StateTrigger:
    """The state trigger of one running engine: ``state_due`` plus the back-off that keeps
    a state of live jobs (or of jobs inside their retention) from compacting in a loop."""

    def __init__(self, policy: CompactionPolicy) -> None:
        self.policy = policy
        self.quiet: tuple[int, float] | None = None  # (state used, until ms) after a look
        self.asked = -float("inf")  # ms: the last near-limit compaction asked for
        self.looks = 0  # how often ``releasable`` was computed (one pass over the jobs)

    def due(self, used: int, limit: int, now_ms: int, releasable: Releasable) -> bool:
        policy = self.policy
        if not policy.state_pressed(used, limit):
            return False
        quiet = self.quiet
        if quiet is not None and now_ms < quiet[1] and \
                used < quiet[0] + STATE_GROWTH_FRACTION * limit:
            return False
        self.looks += 1
        released, next_expiry = releasable(now_ms)
        if policy.state_due(used, limit, released):
            cooled = self.asked + policy.cooldown_s * 1000
            if released >= policy.state_worth(used, limit) or now_ms >= cooled:
                self.asked = now_ms
                self.quiet = None
                return True
            self.quiet = (used, cooled)  # near the limit, asked less than a minute ago
            return False
        if released:
            until: float = now_ms + STATE_RESCAN_MS
        else:
            until = next_expiry if next_expiry is not None else float("inf")
        self.quiet = (used, until)
        return False


class RetentionTrigger:
    """The retention trigger of one running engine: due once the oldest terminal job has
    been past its retention for ``retention_slack_ms``. ``oldest`` (one pass over the
    jobs) is asked only once that moment may have come: a job that finishes later cannot
    move it earlier, so the answer holds until then, for the retention it was judged by (a
    compaction that applies another one makes it look again; a wall clock stepped back
    only delays the next look)."""

    def __init__(self, policy: CompactionPolicy) -> None:
        self.policy = policy
        self.until: float = -float("inf")  # wall ms: no look before this ...
        self.judged_by: int | None = None  # ... under this retention (ms)
        self.looks = 0  # how often ``oldest`` was asked

    def due(self, now_ms: int, retention_ms: int | None,
            oldest: Callable[[], int | None]) -> bool:
        """``oldest()``: the earliest ``terminal_at`` of the retained persistent terminal
        jobs, None when there is none."""
        if not self.policy.enabled or retention_ms is None:
            return False
        if now_ms < self.until and retention_ms == self.judged_by:
            return False
        self.judged_by = retention_ms
        slack = retention_slack_ms(retention_ms)
        self.looks += 1
        oldest_at = oldest()
        if oldest_at is None:  # a job that finishes from now on is due no sooner than this
            self.until = now_ms + retention_ms + slack
            return False
        due_at = oldest_at + retention_ms + slack
        if now_ms < due_at:
            self.until = due_at
            return False
        self.until = now_ms + slack  # one per slack, even if that job did not expire
        return True


def source_bytes(segments_dir: str) -> int:
    """Bytes of every segment file of an epoch (what the trigger calls its history)."""
    total = 0
    with os.scandir(segments_dir) as entries:
        for entry in entries:
            if entry.name.endswith(".tay"):
                try:
                    total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
    return total
