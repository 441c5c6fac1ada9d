"""Indexes of waiting jobs: ready jobs per (queue, task), and due-time / timeout heaps.

Ready jobs are ordered inside their queue by (eligible_at, ready order). Each queue keeps
one heap per task, so a task nobody can run never blocks other tasks of the same queue,
and picking the next job costs O(tasks in the queue + log n). Entries are removed lazily:
an entry is live only while the job is still available with the same ready key.
Queues with ready jobs are served round-robin.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator

ReadyEntry = tuple[int, int, bytes]  # (eligible_at, ready order, job id)


class ReadyIndex:
    def __init__(self, is_live: Callable[[ReadyEntry], bool]) -> None:
        self._is_live = is_live
        self._queues: dict[str, dict[str, list[ReadyEntry]]] = {}
        # Queues with (possibly) ready jobs, in round-robin order: served ones move to the end.
        # EngineState._dispatch reads and moves it directly (``queues``/``served`` inline).
        self.rotation: OrderedDict[str, None] = OrderedDict()

    def push(self, queue: str, task: str, entry: ReadyEntry) -> None:
        heapq.heappush(self._queues.setdefault(queue, {}).setdefault(task, []), entry)
        if queue not in self.rotation:
            self.rotation[queue] = None

    def queues(self) -> list[str]:
        """Queues that may have ready jobs, in round-robin order."""
        return list(self.rotation)

    def served(self, queue: str) -> None:
        """Move a queue that just dispatched to the back of the rotation."""
        if queue in self.rotation:
            self.rotation.move_to_end(queue)

    def heads(self, queue: str) -> list[tuple[str, ReadyEntry]]:
        """The live head entry of every task heap of ``queue`` (dropping stale entries)."""
        tasks = self._queues.get(queue)
        if not tasks:
            self.rotation.pop(queue, None)
            return []
        is_live = self._is_live
        out = []
        for task, heap in tasks.items():
            while heap and not is_live(heap[0]):
                heapq.heappop(heap)
            if heap:
                out.append((task, heap[0]))
        if len(out) != len(tasks):
            for task in [task for task, heap in tasks.items() if not heap]:
                del tasks[task]
            if not tasks:
                del self._queues[queue]
                self.rotation.pop(queue, None)
        return out

    def oldest_ready_at(self, queue: str) -> int | None:
        """When the job of ``queue`` that has waited longest for a dispatch became ready
        (Unix ms; None: none is ready). Its age is the queue's latency, what an operator
        alerts on: it grows while nothing dispatches (no executor, a paused queue, too few
        credits)."""
        return min((head[0] for _, head in self.heads(queue)), default=None)

    def pop(self, queue: str, task: str) -> ReadyEntry:
        return heapq.heappop(self._queues[queue][task])

    def take(self, queue: str, select: Callable[[str, str], Any]) -> tuple | None:
        """Pop the earliest live head of ``queue`` whose task ``select(task, queue)`` finds
        an executor for: (task, head, executor); None when no head has one (nothing is
        popped). ``heads`` then ``pop``, in one call and without the list for the common
        queue of one task."""
        tasks = self._queues.get(queue)
        if tasks is not None and len(tasks) == 1:
            for task, heap in tasks.items():
                is_live = self._is_live
                while heap and not is_live(heap[0]):
                    heapq.heappop(heap)
                if heap:  # else: heads drops the empty heap and the queue
                    executor = select(task, queue)
                    return None if executor is None else (task, heapq.heappop(heap), executor)
        best = None
        for task, head in self.heads(queue):
            if best is not None and head >= best[1]:
                continue
            executor = select(task, queue)
            if executor is not None:
                best = (task, head, executor)
        if best is not None:
            heapq.heappop(self._queues[queue][best[0]])
        return best


COMPACT_FLOOR = 1024


class DueHeap:
    """A min-heap of (due time, tiebreak, key) with lazy invalidation by ``is_live``.

    An entry that went stale far from the head (an execution settled long before its
    timeout) would stay until its due time; so once the heap holds more than twice what
    was live at the last sweep (plus a floor), a sweep keeps only live entries: memory
    stays within a constant factor of the live entries, at amortized O(1) per push, and
    the order of live entries is unchanged (the tiebreak makes every entry distinct).
    """

    def __init__(self, is_live: Callable[[tuple], bool]) -> None:
        self._heap: list[tuple] = []
        self._is_live = is_live
        self._counter = 0
        self._swept = 0  # live entries found by the last sweep
        # tag -> the tiebreak when it was retired: entries whose key starts with the tag
        # and that were pushed by then are stale (``retire``); a sweep drops them all
        self.retired: dict[object, int] = {}

    def push(self, due: int, key: object) -> None:
        self._counter += 1
        heap = self._heap
        heapq.heappush(heap, (due, self._counter, key))
        if len(heap) > 2 * self._swept + COMPACT_FLOOR:
            self._sweep()

    def skip(self, pushes: int) -> None:
        """Move the tiebreak on as ``pushes`` pushes would, without their entries (a
        recovery holds jobs whose timer entries replay would push, already stale)."""
        self._counter += pushes

    def retire(self, tags: Iterable[object]) -> None:
        """Every entry pushed so far whose key's first item is one of ``tags`` is stale
        from now on (a deleted or expired job's: a new job under its id may come to have
        the same key). Which ``is_live`` reads through ``retired``; the sweep that drops
        them empties it (one sweep at most per call: an expiry retires thousands)."""
        retired, counter = self.retired, self._counter
        for tag in tags:
            retired[tag] = counter
        if len(retired) > 2 * self._swept + COMPACT_FLOOR:
            self._sweep()

    def _sweep(self) -> None:
        is_live = self._is_live
        heap = [item for item in self._heap if is_live(item)]
        heapq.heapify(heap)
        self._heap = heap
        self._swept = len(heap)
        self.retired.clear()  # no entry it names is left

    def __len__(self) -> int:
        return len(self._heap)

    def peek_due(self) -> int | None:
        while self._heap and not self._is_live(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: int) -> Iterator[tuple]:
        """Yield live entries whose due time is <= ``now``, in due order."""
        while True:
            due = self.peek_due()
            if due is None or due > now:
                return
            yield heapq.heappop(self._heap)
