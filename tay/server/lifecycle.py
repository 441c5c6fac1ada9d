"""How ``tay serve`` stops, and what it watches while it runs (docs/operations.md).

* The first SIGTERM (or SIGINT) drains: the engine dispatches nothing new, the listeners
  stay open so running executions can report, and the server stops once none is running or
  after ``--drain-timeout`` seconds. A second signal, or a drain timeout of 0, stops at
  once; executions still running then are settled as interrupted at the next start.
* A journal writer that stopped for good keeps answering ``unavailable`` for
  ``WRITER_STOP_EXIT_S`` seconds (so clients in flight learn why), then the server exits
  with status 1 for a supervisor to restart it.
* Jobs that wait for a task no connected executor has registered are logged at WARNING
  (once when noticed, again every ``UNSERVED_REPEAT_S`` while it lasts).
* Job starts that a history cap refused (the jobs stay available, no attempt used) are
  logged at WARNING with how many since the last line, at most every ``CAPPED_REPEAT_S``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("tay.server")

WRITER_STOP_EXIT_S = 10.0
UNSERVED_CHECK_S = 5.0
UNSERVED_REPEAT_S = 600.0
CAPPED_REPEAT_S = 60.0


class Lifecycle:
    def __init__(self, driver: Any, engine: Any, drain_timeout_s: float) -> None:
        self.driver = driver
        self.engine = engine
        self.drain_timeout_s = drain_timeout_s
        self.stop = asyncio.Event()
        self.signals = 0
        self._loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task[None]] = []
        self._warned: dict[tuple[str, str], float] = {}  # (queue, task) -> last warning time
        self._capped_seen = 0  # start refusals already logged
        self._capped_at: float | None = None  # when the last such line was logged

    def start(self) -> None:
        self._tasks.append(self._loop.create_task(self._watch()))

    def on_signal(self) -> None:
        self.signals += 1
        if self.signals > 1 or self.drain_timeout_s <= 0:
            if self.signals > 1:
                log.info("second stop signal: stopping now")
            self.stop.set()
            return
        self._tasks.append(self._loop.create_task(self._drain()))

    async def _drain(self) -> None:
        self.driver.stop_dispatching()
        running = self._running()
        log.info("draining: no new work is started; waiting up to %g s for %d running "
                 "execution(s)", self.drain_timeout_s, running)
        deadline = self._loop.time() + self.drain_timeout_s
        while self._running() and self._loop.time() < deadline and not self.stop.is_set():
            await asyncio.sleep(0.02)
        left = self._running()
        if left:
            log.warning("drain timeout: %d execution(s) still running; they run again after "
                        "the next start (interrupted)", left)
        else:
            log.info("drained: no execution is running")
        self.stop.set()

    def _running(self) -> int:
        return len(self.engine.executors.reservations)

    def on_writer_stopped(self) -> None:
        log.error("journal writer stopped (%s); refusing every request with unavailable and "
                  "exiting in %g s", self.driver.stopped, WRITER_STOP_EXIT_S)
        self._loop.call_later(WRITER_STOP_EXIT_S, self.stop.set)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(UNSERVED_CHECK_S)
            now = self._loop.time()
            self.check_unserved(now)
            self.check_capped_starts(now)

    def check_capped_starts(self, now: float) -> None:
        """One WARNING for the job starts a history cap refused since the last one."""
        refusals = self.engine.activity.start_refusals
        total = sum(refusals.values())
        if total == self._capped_seen:
            return
        if self._capped_at is not None and now - self._capped_at < CAPPED_REPEAT_S:
            return
        history = self.engine.history
        log.warning("history cap reached (%s): %d job start(s) refused since the last report; "
                    "the jobs stay available with no attempt used and start once history has "
                    "room (history %d bytes in %d segments; caps --max-history-bytes %s, "
                    "--max-segments %s): raise a cap, or compact (tay compact) to reclaim "
                    "history",
                    ", ".join(sorted(refusals)), total - self._capped_seen,
                    history.history_bytes, history.segments,
                    history.caps.max_history_bytes or "unset", history.caps.max_segments or "unset")
        self._capped_seen = total
        self._capped_at = now

    def check_unserved(self, now: float) -> None:
        current = {(item["queue"], item["task"]): item for item in self.engine.unserved_tasks()}
        for key in list(self._warned):
            if key not in current:
                del self._warned[key]
        for key, item in current.items():
            last = self._warned.get(key)
            if last is None or now - last >= UNSERVED_REPEAT_S:
                self._warned[key] = now
                log.warning("jobs of task %r in queue %r are waiting and no connected executor "
                            "has registered that task", key[1], key[0],
                            extra={"queue": key[0], "task": key[1]})

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
