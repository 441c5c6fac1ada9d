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
from collections import Counter
from typing import Callable

Entry = tuple[int, bytes]  # (stamp, job id)
StampOf = Callable[[bytes], "int | None"]  # the job's current stamp, None when it is gone

COMPACT_FLOOR = 1024
ALL = ("all", "")


class JobIndex:
    def __init__(self, stamp_of: StampOf) -> None:
        self._stamp_of = stamp_of
        self._lists: dict[tuple[str, str], list[Entry]] = {ALL: []}
        self.live: Counter[tuple[str, str]] = Counter()  # live entries per list

    def touch(self, stamp: int, job_id: bytes, state: str, queue: str, task: str,
              previous: str | None) -> None:
        """Record a transition of ``job_id`` to ``state`` (``previous``: its last state, None
        for a new job)."""
        keys = (ALL, ("state", state), ("queue", queue), ("task", task))
        if previous is None:
            self.live[ALL] += 1
            self.live[keys[2]] += 1
            self.live[keys[3]] += 1
        self.live[keys[1]] += 1
        if previous is not None:
            self.live[("state", previous)] -= 1
        lists = self._lists
        for key in keys:
            entries = lists.get(key)
            if entries is None:
                entries = lists[key] = []
            entries.append((stamp, job_id))
            if len(entries) > 2 * self.live[key] + COMPACT_FLOOR:
                self._compact(key)

    def forget(self, state: str, queue: str, task: str) -> None:
        """A job left the engine (its entries are stale from now on)."""
        for key in (ALL, ("state", state), ("queue", queue), ("task", task)):
            self.live[key] -= 1

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
        return self.live[key]
