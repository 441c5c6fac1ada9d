"""Indexes for the admin job listing: jobs by state, queue and task, most recent change first.

Every job transition stamps the job with the next value of one counter and appends
``(stamp, job_id)`` to four lists: all jobs, its state, its queue and its task. An entry is
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

from bisect import bisect_left
from typing import Callable

Entry = tuple[int, bytes]  # (stamp, job id)
StampOf = Callable[[bytes], "int | None"]  # the job's current stamp, None when it is gone

COMPACT_FLOOR = 1024
ALL = ("all", "")


STATE_KEYS = {state: ("state", state) for state in (
    "scheduled", "available", "executing", "retryable", "completed", "cancelled", "discarded")}


class JobIndex:
    def __init__(self, stamp_of: StampOf) -> None:
        self._stamp_of = stamp_of
        self._lists: dict[tuple[str, str], list[Entry]] = {ALL: []}
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
        item = (stamp, job_id)
        lists = self._lists
        for key in (ALL, state_key, queue_key, task_key):
            entries = lists.get(key)
            if entries is None:
                entries = lists[key] = []
            entries.append(item)
            if len(entries) > 2 * live[key] + COMPACT_FLOOR:
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
            item = (stamp, job_id)
            everything.append(item)
            for key in (STATE_KEYS[state], queue_key, task_key):
                entries = lists.get(key)
                if entries is None:
                    entries = lists[key] = []
                    live[key] = 0
                entries.append(item)
                live[key] += 1
        live[ALL] = len(everything)
        return index

    def forget(self, state: str, job_keys: tuple[tuple[str, str], tuple[str, str]]) -> None:
        """A job left the engine (it expired at a compaction): its entries are stale now."""
        live = self.live
        for key in (ALL, STATE_KEYS[state], *job_keys):
            live[key] -= 1

    def _compact(self, key: tuple[str, str]) -> None:
        stamp_of = self._stamp_of
        self._lists[key] = [entry for entry in self._lists[key] if stamp_of(entry[1]) == entry[0]]

    def page(self, key: tuple[str, str], before: int | None, limit: int,
             accept: Callable[[bytes], bool], scan_limit: int) -> tuple[list[bytes], int | None]:
        """Up to ``limit`` accepted job ids of one list, newest first, stamps below ``before``.

        Returns the ids and the cursor of the next page (None: nothing older). At most
        ``scan_limit`` entries are examined; a page that reaches it ends early with a cursor.
        """
        entries = self._lists.get(key, [])
        end = len(entries) if before is None else bisect_left(entries, (before, b""))
        stamp_of = self._stamp_of
        found: list[bytes] = []
        position = end - 1
        stop = max(-1, end - 1 - scan_limit)
        while position > stop:
            stamp, job_id = entries[position]
            position -= 1
            if stamp_of(job_id) == stamp and accept(job_id):
                found.append(job_id)
                if len(found) == limit:
                    break
        if position < 0:
            return found, None
        return found, entries[position + 1][0]

    def size(self, key: tuple[str, str]) -> int:
        """Live entries of one list (what a filter on that key can match at most)."""
        return self.live.get(key, 0)
