"""Indexes for the admin job listing: jobs by state, queue and task, most recent change first.

Every job transition stamps the job with the next value of one counter and appends
``(stamp, job_id)`` to four lists: all jobs, its state, its queue and its task (each list
keeps its stamps in an ``array`` beside a list of the ids: 16 bytes an entry instead of a
tuple and an int object, the index's memory roughly halved). An entry is
live while the job still exists and still carries that stamp, so a transition costs four
appends and no deletion; stale entries are dropped when a list holds more than twice its
live count (plus a floor), which keeps memory within a constant factor and the rebuild cost
amortized O(1) per transition.

A page walks one list backwards from the cursor (a stamp: exclusive), bisecting to it, and
checks the other filters on each live entry. The work per page is bounded by ``scan_limit``
entries; a page that hits it is returned short with a cursor, so no filter combination can
make a page slow (docs/admin.md).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable

StampOf = Callable[[bytes], "int | None"]  # the job's current stamp, None when it is gone

COMPACT_FLOOR = 1024
ALL = ("all", "")


STATE_KEYS = {state: ("state", state) for state in (
    "scheduled", "available", "executing", "retryable", "completed", "cancelled", "discarded")}


class Entries:
    """One list: stamps (ascending) and the job ids they were given to, side by side."""

    __slots__ = ("stamps", "ids")

    def __init__(self) -> None:
        self.stamps = array("q")
        self.ids: list[bytes] = []

    def append(self, stamp: int, job_id: bytes) -> None:
        self.stamps.append(stamp)
        self.ids.append(job_id)

    def __len__(self) -> int:
        return len(self.ids)


class JobIndex:
    def __init__(self, stamp_of: StampOf) -> None:
        self._stamp_of = stamp_of
        self._lists: dict[tuple[str, str], Entries] = {ALL: Entries()}
        self.live: dict[tuple[str, str], int] = {ALL: 0}  # live entries per list

    @staticmethod
    def job_keys(queue: str, task: str) -> tuple[tuple[str, str], tuple[str, str]]:
        """The queue and task list keys of a job (made once per job, not per transition)."""
        return ("queue", queue), ("task", task)

    def touch(self, stamp: int, job_id: bytes, state: str,
              job_keys: tuple[tuple[str, str], tuple[str, str]], previous: str | None) -> None:
        """Record a transition of ``job_id`` into ``state`` (``previous``: its last state,
        None for a new job); ``job_keys`` from ``job_keys``."""
        live = self.live
        state_key = STATE_KEYS[state]
        queue_key, task_key = job_keys
        if previous is None:
            live[ALL] += 1
            live[queue_key] = live.get(queue_key, 0) + 1
            live[task_key] = live.get(task_key, 0) + 1
        else:
            live[STATE_KEYS[previous]] -= 1
        live[state_key] = live.get(state_key, 0) + 1
        lists = self._lists
        for key in (ALL, state_key, queue_key, task_key):
            entries = lists.get(key)
            if entries is None:
                entries = lists[key] = Entries()
            entries.stamps.append(stamp)
            ids = entries.ids
            ids.append(job_id)
            if len(ids) > 2 * live[key] + COMPACT_FLOOR:
                self._compact(key)

    @classmethod
    def build(cls, stamp_of: StampOf,
              jobs: "list[tuple[int, bytes, str, tuple[tuple[str, str], tuple[str, str]]]]"
              ) -> "JobIndex":
        """The index of ``(stamp, job_id, state, job_keys)`` rows at once (after a replay):
        one entry per job and list, in stamp order, so nothing is stale."""
        index = cls(stamp_of)
        lists, live = index._lists, index.live
        everything = lists[ALL]
        for stamp, job_id, state, (queue_key, task_key) in sorted(jobs):
            everything.append(stamp, job_id)
            for key in (STATE_KEYS[state], queue_key, task_key):
                entries = lists.get(key)
                if entries is None:
                    entries = lists[key] = Entries()
                    live[key] = 0
                entries.append(stamp, job_id)
                live[key] += 1
        live[ALL] = len(everything)
        return index

    def forget(self, state: str, job_keys: tuple[tuple[str, str], tuple[str, str]],
               count: int = 1) -> None:
        """``count`` jobs of one state and keys left the engine (they expired at a
        compaction): their entries are stale now."""
        live = self.live
        for key in (ALL, STATE_KEYS[state], *job_keys):
            live[key] -= count

    def _compact(self, key: tuple[str, str]) -> None:
        stamp_of = self._stamp_of
        old = self._lists[key]
        kept = self._lists[key] = Entries()
        for stamp, job_id in zip(old.stamps, old.ids):
            if stamp_of(job_id) == stamp:
                kept.append(stamp, job_id)

    def page(self, key: tuple[str, str], before: int | None, limit: int,
             accept: Callable[[bytes], bool], scan_limit: int) -> tuple[list[bytes], int | None]:
        """Up to ``limit`` accepted job ids of one list, newest first, stamps below ``before``.

        Returns the ids and the cursor of the next page (None: nothing older). At most
        ``scan_limit`` entries are examined; a page that reaches it ends early with a cursor.
        """
        entries = self._lists.get(key)
        if entries is None:
            return [], None
        stamps, ids = entries.stamps, entries.ids
        end = len(ids) if before is None else bisect_left(stamps, before)
        stamp_of = self._stamp_of
        found: list[bytes] = []
        position = end - 1
        stop = max(-1, end - 1 - scan_limit)
        while position > stop:
            stamp, job_id = stamps[position], ids[position]
            position -= 1
            if stamp_of(job_id) == stamp and accept(job_id):
                found.append(job_id)
                if len(found) == limit:
                    break
        if position < 0:
            return found, None
        return found, stamps[position + 1]

    def size(self, key: tuple[str, str]) -> int:
        """Live entries of one list (what a filter on that key can match at most)."""
        return self.live.get(key, 0)
