"""Online compaction in a running ``tay serve`` (docs/compaction.md, storage.md §3.8).

``OnlineCompactor`` runs one compaction at a time, started by the size/ratio trigger, a
state-budget refusal or the state-ratio trigger (``CompactionPolicy``, checked every
``check_interval_s``; ``status.storage.last_compaction.trigger`` says which) or by the
admin ``compact`` action (which waits for the outcome; a request during a run joins it).
The storage work is ``tay.storage.compaction.online``; this module decides when, and does
the two steps that must hold the event loop:

* **capture**: the committer is drained and suspended, the journal rotated (the frozen
  source ends at a durable position), the writer resumed, and the engine's state taken; the
  driver starts copying every record it submits (``driver.tap``).
* **switch** (admission paused: nothing runs on the loop meanwhile): the committer is
  drained and suspended, the copied records become the candidate's tail, the epoch is
  published and CURRENT switched, the engine adopts it (expiries, orders, sequences) and the
  writer resumes on the new tail. Only durable records are copied, and replies wait for
  the writer as always, so durable-before-visible holds throughout.

The candidate is written and verified in between by a process forked at the capture
(``tay.storage.compaction.forked``: it holds an interpreter lock of its own), while the
engine serves. A failure before CURRENT switches leaves the old epoch authoritative and
the server serving; it is logged, counted, and retried after a backoff (doubling up to 10
minutes). One that an operator's change made meanwhile supersedes (a job the plan
expires retried by hand) is no failure: counted as superseded and tried again in seconds. A switch whose outcome is uncertain, or a journal that cannot follow the new
epoch, stops writing for good (the supervisor restarts the server, which opens whatever
CURRENT names).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tay.failures import RequestRefused, StorageFailure, WriterStopped
from tay.server import process_figures
from tay.storage.fsio import RealIO
from tay.storage.journal.history_budget import HistoryBudget
from tay.storage.compaction.trigger import RetentionTrigger, StateTrigger, source_bytes
from tay.storage.journal.writer import Journal
from tay.storage.v2.manifest import Retention, durable_form

if TYPE_CHECKING:  # the compaction machinery itself loads with the first compaction
    from tay.storage.compaction import online
    from tay.storage.compaction.forked import CompactionProcess, PreparedFacts

log = logging.getLogger("tay.server.compaction")

BACKOFF_FIRST_S = 30.0
BACKOFF_MAX_S = 600.0
# an attempt an operator's change superseded (a job the plan expires retried by hand while
# it ran): nothing is wrong, so it is not a failure; tried again soon (the retried job is
# not expired then), the delay doubling while attempts keep being superseded
SUPERSEDED = frozenset({"expired_job_changed"})
SUPERSEDED_FIRST_S = 5.0
# catch-up rounds before the switch (in the compaction process) until at most this many
# records are left for the paused switch to append; a bounded number of rounds under heavy
# load
SWITCH_RECORDS = 256
CATCH_UP_ROUNDS = 16


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class CompactionFailed(Exception):
    """An online compaction that did not publish (the old epoch stays authoritative)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class OnlineCompactor:
    """One store's online compactions, on the driver's loop."""

    def __init__(self, driver: Any, store: Any, config: Any, metrics: Any = None, *,
                 clock: Callable[[], int] = wall_ms, io: RealIO | None = None) -> None:
        self.driver = driver
        self.store = store
        self.config = config
        self.policy = config.compaction
        self.metrics = metrics
        self.clock = clock  # wall ms: the capture time retention is judged at
        self.io = io or RealIO()
        self.last: dict[str, Any] | None = None  # the last finished compaction's facts
        self.last_failure: dict[str, Any] | None = None
        self.failures = 0  # consecutive failed attempts (the backoff doubles with them)
        self.superseded = 0  # consecutive attempts superseded by an operator's change
        self.retry_at = 0.0  # monotonic: no automatic attempt before this
        self._running: asyncio.Task[dict[str, Any]] | None = None
        self._process: CompactionProcess | None = None  # the running one's child
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._refusals_seen = 0  # the state budget's refusal count at the last look
        self._budget_asked = -float("inf")
        self.state_trigger = StateTrigger(self.policy)
        self.retention_trigger = RetentionTrigger(self.policy)

    # ---- what the store is now ----------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.store.store_version == 2 and self.driver.stopped is None

    def process_figures(self) -> dict[str, Any] | None:
        """What the running compaction's process holds and used so far
        (``tay.server.process_figures.compaction``); None between compactions."""
        process = self._process
        return process_figures.compaction(process.pid) if process is not None else None

    def history_bytes(self) -> int:
        return source_bytes(self.store.journal.segments_dir)

    def facts(self) -> dict[str, Any]:
        """``status.storage``'s Store-v2 part."""
        journal = self.store.journal
        retention = self.store.retention
        return {
            "format": "v2" if self.store.store_version == 2 else "v1",
            "epoch": journal.epoch_id.hex() if self.store.store_version == 2 else None,
            "retention": retention.to_value() if retention is not None else None,
            "last_compaction": self.last,
            "compaction": {
                "enabled": self.policy.enabled, "running": self._running is not None,
                "process_pid": self._process.pid if self._process is not None else None,
                "process": self.process_figures(),
                "processes_cpu_s": (round(self.metrics.compaction_cpu_s, 3)
                                    if self.metrics is not None else None),
                "history_bytes": self.history_bytes() if self.store.store_version == 2 else None,
                "base_bytes": self.store.base_bytes,
                "trigger_history_bytes": self.policy.history_bytes,
                "trigger_ratio": self.policy.ratio,
                "trigger_state_ratio": self.policy.state_ratio,
                "state_bytes": self.store.engine.budget.used,
                "consecutive_failures": self.failures,
                "consecutive_superseded": self.superseded,
                "last_failure": self.last_failure,
            },
        }

    # ---- the trigger ----------------------------------------------------------------------
    def start(self) -> None:
        if self.policy.enabled and self.store.store_version == 2:
            self._arm()

    def _arm(self) -> None:
        if not self._closed:
            self._timer = self.driver.loop.call_later(self.policy.check_interval_s, self._check)

    def _check(self) -> None:
        self._timer = None
        try:
            now = time.monotonic()
            if self._running is None and self.available and now >= self.retry_at:
                history = self.history_bytes()
                if self.policy.due(history, self.store.base_bytes):
                    self.request("automatic")
                elif self.policy.dead_tail_due(history, self.store.base_bytes,
                                               self.store.engine.budget.used):
                    self.request("dead_tail")
                elif self._budget_pressed(now):
                    self.request("state_budget")
                elif self._state_pressed():
                    self.request("state_ratio")
                elif self._retention_pressed():
                    self.request("retention")
        except OSError as error:  # the epoch directory is unreadable: recovery's business
            log.warning("compaction trigger could not measure the history: %s", error)
        self._arm()

    def _budget_pressed(self, now: float) -> bool:
        """The state budget refused work since the last look: expiry may free it (asked at
        most once per ``cooldown_s``)."""
        refusals = self.store.engine.budget.refusals
        if refusals == self._refusals_seen or now - self._budget_asked < self.policy.cooldown_s:
            return False
        self._refusals_seen = refusals
        self._budget_asked = now
        return True

    def _state_pressed(self) -> bool:
        """The retained state passed ``state_ratio`` of the budget and expiry would release
        enough of it (``StateTrigger``: it backs off after a look that finds too little)."""
        budget = self.store.engine.budget
        return self.state_trigger.due(budget.used, budget.limit, self.clock(), self.releasable)

    def _retention_pressed(self) -> bool:
        """The oldest terminal job outlived its retention by the slack (``RetentionTrigger``)."""
        retention = self.store.retention
        duration = None if retention is None else durable_form(retention).duration_ms
        return self.retention_trigger.due(self.clock(), duration,
                                          self.store.engine.oldest_terminal)

    def releasable(self, wall: int) -> tuple[int, int | None]:
        """What a compaction at ``wall`` would release (``EpochEngine.expirable``)."""
        retention = self.store.retention
        if retention is None:
            return 0, None
        return self.store.engine.expirable(durable_form(retention), wall)

    def request(self, trigger: str, retention: Retention | None = None) -> asyncio.Task:
        """Start a compaction (or join the one running); the task gives its report or
        raises ``CompactionFailed``."""
        if self._running is None:
            self._running = asyncio.ensure_future(self._run(trigger, retention))
            self._running.add_done_callback(self._finished)
        return self._running

    def _finished(self, task: asyncio.Task) -> None:
        self._running = None
        if not task.cancelled():
            task.exception()  # retrieved: failures are logged and counted in _run

    async def compact(self, retention: Retention | None = None) -> dict[str, Any]:
        """The admin action: run one now and return its report."""
        if self.store.store_version != 2:
            raise RequestRefused("online compaction needs a Store-v2 store; this one is v1 "
                                 "(start tay serve with --compaction on to adopt it)",
                                 code="compaction_unavailable")
        if self.driver.stopped is not None:
            raise RequestRefused("the journal writer stopped", code="unavailable")
        try:
            return await asyncio.shield(self.request("admin", retention))
        except CompactionFailed as failure:
            raise RequestRefused(f"the compaction did not publish ({failure}); the store is "
                                 "unchanged", code="compaction_failed",
                                 reason=failure.reason) from None

    async def at_stop(self) -> dict[str, Any] | None:
        """A clean stop's snapshot (``--compact-on-stop``): once a running compaction is
        over, one more if ``CompactionPolicy.stop_due``, so the next start replays a base of
        snapshots rather than the tail. The same online compaction as any other (crash
        safe at every step); a failure is logged and leaves the store as it was. Returns
        its report, or None if none ran."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            try:
                await self._running
            except Exception:
                pass  # logged and counted by _run
        if self._closed or not self.available or \
                not self.policy.stop_due(self.history_bytes(), self.store.base_bytes):
            return None
        try:
            return await self.request("stop")
        except CompactionFailed:
            return None  # logged and counted by _run; the next start replays the tail

    async def close(self) -> None:
        """Stop the trigger and wait for a running compaction (its process writes only a
        candidate, which the next compaction removes if it never publishes)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        running = self._running
        if running is not None:
            try:
                await running
            except Exception:
                pass  # logged and counted by _run

    # ---- one compaction -------------------------------------------------------------------
    async def _run(self, trigger: str, retention: Retention | None) -> dict[str, Any]:
        # loaded with the first compaction
        from tay.storage.compaction.forked import CompactionProcess, ProcessFailure

        started = time.monotonic()
        loop = asyncio.get_running_loop()
        bytes_before = self.history_bytes()
        process = None
        prepared = None
        try:
            # the held runs copy their base bytes off the loop first (a pread and a CRC check
            # each, outside the interpreter lock); the capture loads any run left
            await loop.run_in_executor(None, self.store.engine.finished.load)
            capturing = time.perf_counter()
            capture = self._capture(retention)
            # the storage work runs in a child forked here, a copy of the engine as captured
            process = self._process = CompactionProcess.start(capture, self.io)
            capture_ms = (time.perf_counter() - capturing) * 1000  # the loop held throughout
            forked_ms = _ms_since(started)
            prepared = await loop.run_in_executor(None, process.wait_prepared)
            # every step's ms since the start (the process counts from the fork)
            prepared.timings_ms = {"captured": forked_ms, **{
                step: at + forked_ms for step, at in prepared.timings_ms.items()}}
            expected = capture.source.frontier + 1  # the next sequence the tail takes
            for _ in range(CATCH_UP_ROUNDS):
                chunk = self.driver.tap
                if chunk is None or len(chunk) <= SWITCH_RECORDS:
                    break
                self.driver.tap = []  # the loop fills a new one; this one goes to the process
                expected = _continues(chunk, expected)
                await loop.run_in_executor(None, _copy_ahead, process, prepared, chunk)
            if self.driver.stopped is not None or self._closed:
                raise CompactionFailed("stopped", "the server stopped writing meanwhile")
            report = self._switch(process, prepared, expected)
            prepared.timings_ms["switched"] = _ms_since(started)
        except BaseException as error:
            self.driver.tap = None
            self._failed(error, started, process, prepared)
            if isinstance(error, (CompactionFailed, StorageFailure, OSError, ProcessFailure)):
                raise error if isinstance(error, CompactionFailed) else CompactionFailed(
                    getattr(error, "reason", type(error).__name__), str(error)) from None
            raise
        # forked here, before the engine moves on from the switch (no await since)
        check = process.check(report.pop("_verify"))
        report["check_fork_ms"] = round(check.fork_ms, 3)
        try:
            await loop.run_in_executor(None, check.wait)
        except ProcessFailure as failure:
            await loop.run_in_executor(None, process.kill)
            self._process = None
            self._reaped(process)
            if not failure.storage:  # the check did not run to its end: no verdict
                log.error("the published epoch %s could not be verified against the "
                          "engine (%s); it stays authoritative", prepared.epoch_id.hex(),
                          failure)
                self._count("verification_incomplete")
                raise CompactionFailed(failure.reason, str(failure)) from None
            log.critical("the published epoch %s does not replay to the engine's state (%s); "
                         "writing stops, restart to serve what the store holds",
                         prepared.epoch_id.hex(), failure)
            failure_stop = WriterStopped("changed_view", "compaction_mismatch",
                                         epoch_id=prepared.epoch_id.hex())
            try:
                self.driver.suspend_writer()  # what is queued is written first
            except WriterStopped:
                pass
            self.driver.abandon_writer(failure_stop)
            self._count("verification_failed")
            raise CompactionFailed("verification_mismatch", str(failure)) from None
        prepared.timings_ms["verified"] = _ms_since(started)
        await loop.run_in_executor(None, process.close)
        self._process = None
        report["process"] = self._reaped(process)
        report["reclaimed"], report["reclaim_error"] = await loop.run_in_executor(
            None, self._reclaim, capture.source, report["_current"])
        del report["_current"]
        report["duration_ms"] = round((time.monotonic() - started) * 1000)
        report["capture_ms"] = round(capture_ms, 3)
        report["fork_ms"] = round(process.fork_ms, 3)
        report["bytes_before"] = bytes_before
        report["bytes_after"] = self.history_bytes()
        report["trigger"] = trigger
        self.last = report
        self.failures = self.superseded = 0
        self.retry_at = 0.0
        self._count("published", time.monotonic() - started, report["pause_ms"] / 1000)
        log.info("compacted the store online: epoch %s, %d jobs kept, %d expired, %d bytes "
                 "-> %d, %d ms (writes paused %.1f ms)", report["epoch_id"],
                 report["retained_jobs"], report["expired_jobs"], bytes_before,
                 report["bytes_after"], report["duration_ms"], report["pause_ms"])
        return report

    def _capture(self, retention: Retention | None) -> online.Capture:
        """On the loop: freeze the source at a durable position and take the engine's state."""
        from tay.storage.compaction import online, publish
        driver, store, engine = self.driver, self.store, self.store.engine
        if self.driver.stopped is not None:
            raise CompactionFailed("stopped", "the journal writer stopped")
        # the finished jobs held in columns read their bytes from the base this compaction
        # replaces: copy them first (a read that fails fails the compaction, nothing changed),
        # so the old base's space is freed once it is reclaimed
        engine.finished.load()
        journal = driver.suspend_writer()
        try:
            journal.rotate()  # the source ends here; an I/O error stops the writer for good
        except WriterStopped as stopped:
            driver.abandon_writer(stopped)
            raise
        driver.resume_writer(journal)
        assert engine.next_sequence == journal.next_sequence
        self._reattach_history(journal)
        source = online.OnlineSource(
            root=journal.root, store_id=journal.store_id, epoch_id=journal.epoch_id,
            current=publish.read_current(self.io, journal.root) or b"",
            segments_dir=journal.segments_dir, active_id=journal.segment_id,
            frontier=journal.next_sequence - 1, rotation_target=journal.rotation_target)
        captured_at = self.clock()
        captured, next_order = engine.online_capture()
        applied = durable_form(retention or store.retention)
        driver.tap = []
        return online.Capture(source, captured_at, applied, captured.jobs,
                              engine.checkpoints(captured_at), next_order,
                              state_of=captured.state_of, id_of=captured.id_of,
                              states_of=captured.states_of, plan_of=captured.plan_of)

    def _switch(self, process: CompactionProcess, prepared: PreparedFacts,
                expected: int) -> dict[str, Any]:
        """On the loop, admission paused: catch-up, publish, CURRENT, the new tail."""
        from tay.storage.compaction import online, publish
        driver, store, engine = self.driver, self.store, self.store.engine
        paused = time.perf_counter()
        journal = driver.suspend_writer()
        records, driver.tap = driver.tap or [], None
        source = prepared.capture.source
        try:
            if _continues(records, expected) != journal.next_sequence:
                raise CompactionFailed("catch_up_gap", "the journal moved past the copied "
                                       f"records ({journal.next_sequence})")
            records = online.without_deleted_expiries(records, prepared.expired)
            # every job changed since the capture is in a record of the catch-up, so only
            # those are looked at, not every job the plan expires
            touched = prepared.touched | online.touched_jobs(records)
            stale = engine.stale_expiries(prepared.expired, touched)
            if stale:
                raise CompactionFailed("expired_job_changed", f"{len(stale)} job(s) the plan "
                                       "expires changed since the capture (e.g. "
                                       f"{stale[0].hex()})")
            tail, current = process.publish_switch(records)  # re-framed there
        except BaseException:
            driver.resume_writer(journal)  # the old epoch is still authoritative
            raise
        try:
            publish.switch_current(self.io, source.root, current, source.current)
        except BaseException as error:  # which CURRENT is on disk is uncertain: stop
            driver.abandon_writer(WriterStopped("changed_view", "compaction_switch_uncertain",
                                                path=source.root, error=str(error)))
            raise
        # the point of no return: the new epoch is authoritative
        try:
            journal.close(release_lock=False)
            new_journal = Journal.open(
                self.io, source.root, journal.lock, tail, durability=journal.durability,
                rotation_target=journal.rotation_target,
                segments_dir=online.epoch_segments(source.root, prepared.epoch_id),
                epoch_id=prepared.epoch_id)
        except BaseException as error:
            driver.abandon_writer(WriterStopped("io", "compaction_reopen_failed",
                                                path=source.root, error=str(error)))
            raise
        expired = engine.adopt_compaction(list(prepared.expired), prepared.capture.next_order,
                                          prepared.order_shift, new_journal.next_sequence,
                                          touched)
        store.journal = new_journal
        store.retention = prepared.capture.retention
        store.base_bytes = prepared.base_bytes
        driver.resume_writer(new_journal)
        self._reattach_history(new_journal)
        pause_ms = (time.perf_counter() - paused) * 1000
        touched_ids = list(touched)

        def engine_side() -> tuple[Any, int, dict[tuple, int]]:
            """Step 10's engine side, built in the checking process (forked right after
            this switch, so the engine stands as the switch left it)."""
            captured = engine.captured_jobs_of(touched_ids)
            live = dict(zip(touched_ids, captured.jobs))
            live_count = sum(1 for entry in engine.jobs.values() if not entry.volatile) \
                + len(engine.finished)  # jobs held in columns are persistent
            return (online.live_fields(live, captured.states_of), live_count,
                    engine.epoch.entities)

        return {
            "epoch_id": prepared.epoch_id.hex(), "source_epoch_id": source.epoch_id.hex(),
            "captured_at": prepared.capture.captured_at, "finished_at": self.clock(),
            "terminal_retention": prepared.capture.retention.to_value(),
            "retained_jobs": prepared.retained_jobs, "expired_jobs": expired,
            "base_bytes": prepared.base_bytes,
            "catch_up_records": prepared.catch_up_records + len(records),
            "switch_records": len(records),
            "pause_ms": round(pause_ms, 3), "timings_ms": prepared.timings_ms,
            "_current": current,
            "_verify": engine_side,
        }

    def _reattach_history(self, journal: Journal) -> None:
        engine = self.store.engine
        if engine.history is not None:
            engine.attach_history(HistoryBudget.for_journal(journal, engine.history.caps))

    def _reclaim(self, source: online.OnlineSource, current: bytes) -> tuple[bool, str | None]:
        from tay.storage.compaction import publish

        try:
            publish.reclaim_epoch(self.io, source.root, source.epoch_id, current)
        except (OSError, StorageFailure) as error:
            log.warning("the previous epoch %s was not reclaimed (%s); the next compaction "
                        "leaves it to an operator", source.epoch_id.hex(), error)
            return False, str(error)
        return True, None

    # ---- failures -------------------------------------------------------------------------
    def _failed(self, error: BaseException, started: float,
                process: CompactionProcess | None, prepared: PreparedFacts | None) -> None:
        if process is not None:
            process.kill()  # nothing writes the candidate any more
            self._process = None
            self._reaped(process)
        if prepared is not None and os.path.isdir(prepared.candidate_path):
            from tay.storage.compaction import publish

            try:
                publish.reclaim_candidate(self.io, prepared.capture.source.root,
                                          prepared.candidate_nonce)
            except (OSError, StorageFailure):
                pass  # leaked: the next compaction removes it
        superseded = isinstance(error, CompactionFailed) and error.reason in SUPERSEDED
        if superseded:
            self.superseded += 1
            backoff = min(BACKOFF_MAX_S, SUPERSEDED_FIRST_S * 2 ** (self.superseded - 1))
        else:
            self.failures += 1
            backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self.failures - 1))
        outcome = "superseded" if superseded else "failed"
        self.retry_at = time.monotonic() + backoff
        self.last_failure = {"at": self.clock(), "error": str(error)[:500],
                             "retry_in_s": backoff, "outcome": outcome}
        self._count(outcome, time.monotonic() - started)
        if superseded:
            log.warning("online compaction superseded by a change made meanwhile, the store "
                        "is unchanged; next attempt in %.0f s: %s", backoff, error)
        elif self.driver.stopped is None:
            log.error("online compaction failed, the store is unchanged and keeps being "
                      "served; next automatic attempt in %.0f s: %s", backoff, error)
        else:
            log.error("online compaction failed and the journal writer stopped: %s", error)

    def _reaped(self, process: CompactionProcess) -> dict[str, Any]:
        """Once the compaction's processes are reaped: count their CPU, and say what they
        used (the check's: null if it was never forked)."""
        used = [usage for usage in (process.usage, process.check_usage) if usage is not None]
        if self.metrics is not None:
            self.metrics.observe_compaction_cpu(sum(u.ru_utime + u.ru_stime for u in used))
        check = process.check_usage
        return {"pid": process.pid, **process_figures.reaped(process.usage),
                "check": process_figures.reaped(check) if check is not None else None}

    def _count(self, outcome: str, seconds: float | None = None,
               pause_s: float | None = None) -> None:
        if self.metrics is not None:
            self.metrics.observe_compaction(outcome, seconds, pause_s)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def _copy_ahead(process: CompactionProcess, prepared: PreparedFacts, chunk: list) -> None:
    """A catch-up round, off the loop: the chunk without the deletions of jobs the plan
    expires (``online.without_deleted_expiries``), then to the process."""
    from tay.storage.compaction import online

    process.copy_ahead(online.without_deleted_expiries(chunk, prepared.expired))


def _continues(records: list, expected: int) -> int:
    """The records copied since the capture must be contiguous: ``records`` start at
    ``expected``; returns the sequence after them."""
    if records and (records[0][0] != expected or records[-1][0] != expected + len(records) - 1):
        raise CompactionFailed("catch_up_gap", f"the copied records do not continue the "
                               f"catch-up at {expected} (found {records[0][0]})")
    return expected + len(records)
