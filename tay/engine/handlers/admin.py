"""The engine side of the operations API (docs/admin.md): bounded reads and admin actions.

Every op is one ``Admin(conn, request_id, op, body)`` command. Reads build their reply from
the engine's indexes (``job_index``, ``queue_counts``, the executor registry, the schedule
table, ``activity``) and never scan all jobs. Actions write durable events through the
one mutation path, so their replies leave only once those events are durable:

* ``retry_job``: retryable -> (6,1) mode 0 (run now, same attempt); discarded -> (6,1)
  mode 1 (new cycle); cancelled -> (23,2) ``job_requeued`` (new cycle); scheduled -> (27,2)
  ``job_expedited`` (runs now, before its scheduled time);
* ``cancel_job``: (5,1), like a producer cancel;
* ``cancel_jobs``: ``cancel_job`` for up to ``limit`` jobs in one cancellable state (and
  queue, task), most recently changed first, following a cursor like ``retry_jobs``;
* ``delete_job`` / ``delete_jobs``: a finished (completed, discarded, cancelled) job leaves
  the engine with a (29,2) ``job_deleted`` (a volatile one at once), its id free again;
  the next compaction leaves its records out of the store;
* ``pause_queue`` / ``resume_queue``: (20,2) / (21,2); a paused queue dispatches nothing
  (running executions finish) and stays paused across restarts;
* ``scale_queue``: (24,2); the queue's credits from now on, across restarts, over the
  configured ones (running executions above a lowered limit finish), or nil: the
  configured credits again;
* ``limit_queue``: (28,2); at most ``starts`` job starts of the queue in any ``period_ms``
  from now on, across restarts (both null: no limit);
* ``purge_queue``: cancels waiting (scheduled, available, retryable) jobs of a queue with
  (5,1) events, at most ``limit`` per request; the reply says how many remain;
* ``cancel_schedule``: (13,2) ``cancelled``, like a producer ``cancel_schedule``;
* ``pause_schedule`` / ``resume_schedule``: (25,2) / (26,2); a paused schedule delivers
  no occurrence (its admitted jobs run) and stays paused across restarts and
  re-declarations; a resume first skips the due times missed while paused with a (13,2)
  ``advanced``, as an overlap skip does, so it never delivers a backlog;
* ``quiet_worker`` / ``unquiet_worker``: the connections of a worker's runtime id are offered
  no new execution (what they run goes on), or offered work again; not durable: kept for
  the engine's run, so a worker that reconnects stays quiet (Sidekiq's "Quiet");
* ``run_schedule``: one job of the schedule's definition now, as a producer's enqueue of
  its task, args and options would make it ((1,1) or the fused insert): not an occurrence
  (a new random id; the schedule's next due time, its last job and its overlap rule stay
  as they are).
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Callable

from tay.engine.bulk_states import CANCELLABLE, DELETABLE, RETRIABLE
from tay.engine.commands import Admin, Enqueue
from tay.engine.activity import OUTCOMES, PAIRS_MAX, RUN_BOUNDS_MS
from tay.engine.content_filters import (
    CONTENT_SCAN_LIMIT, args_match, error_match, parse_args_filter, parse_error_filter,
)
from tay.engine.day_history import last_days
from tay.engine.effects import Outcome
from tay.engine.executors import Executor
from tay.engine.retained.built import captured_states
from tay.engine.retained.jobs import (
    STATE_SLOT, WAITING, JobEntry, LazyJobEntry, peek, read_state, timeline,
)
from tay._native._pure_base import QUEUE, WORKER
from tay.engine.schedules.commands import ScheduleCommands, request_fields
from tay.engine.schedules.table import schedule_timing  # the engine's lazy boundary
from tay.engine.validation.ids import is_identifier
from tay.failures import RequestRefused
from tay.storage import events as ev
from tay.storage.events.definition import KEY_MAX_BYTES
from tay.storage.events.operations import (
    DAY_MS, QUEUE_CREDITS_MAX, RATE_PERIOD_MAX_MS, RATE_STARTS_MAX, SCHEDULE_CONTROL_PAIRS,
    job_deleted, job_expedited, job_requeued, queue_paused, queue_rate_limited, queue_resumed,
    queue_scaled, schedule_paused, schedule_resumed,
)
from tay.storage.events.transitions import STATES

PAGE_DEFAULT, PAGE_MAX = 50, 100
SCAN_LIMIT = 10_000  # index entries one jobs page may examine (docs/admin.md)
_LISTING_FIELDS = frozenset({"state", "queue", "task", "args", "error", "limit", "cursor"})
PURGE_DEFAULT, PURGE_MAX = 1_000, 10_000
BULK_DEFAULT, BULK_MAX = 1_000, 10_000  # retry_jobs, cancel_jobs, delete_jobs: per request
NEXT_OCCURRENCES = 5
FAILURE_WINDOW_MS = 3_600_000
FAILURES_MAX = 100
HISTORY_DAYS_DEFAULT = 30  # days the history op gives unless asked
HISTORY_DAYS_MAX = 3_660  # and at most (ten years)
LATENCY_SERIES_MAX = 8  # queues whose latency and throughput history the activity op gives
RUNNING_SHOWN = 10  # executions the workers op lists per executor (its oldest)
TASKS_DEFAULT, TASKS_MAX = 100, 1_000  # (queue, task) rows of one tasks read


def _limit(body: dict[str, Any], default: int, high: int, field: str = "limit") -> int:
    """The request's ``field`` (``limit`` unless named), an integer in 1..``high``;
    ``default`` when left out or null."""
    limit = body.get(field, default)
    if limit is None:
        return default
    if type(limit) is not int or not 1 <= limit <= high:
        raise RequestRefused(f"{field} must be an integer in 1..{high}", code="invalid_request",
                             field=field)
    return limit


def _key(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if type(value) is not str or not value or "\x00" in value \
            or len(value.encode("utf-8", "surrogatepass")) > KEY_MAX_BYTES:
        raise RequestRefused(f"{name} must be 1..255 UTF-8 bytes without NUL",
                             code="invalid_request", field=name)
    return value


def _optional_key(body: dict[str, Any], name: str) -> str | None:
    return None if body.get(name) is None else _key(body, name)


def _stamp_cursor(body: dict[str, Any]) -> int | None:
    cursor = body.get("cursor")
    if cursor is None:
        return None
    if type(cursor) is not str or not cursor.isdigit() or len(cursor) > 20:
        raise RequestRefused("cursor must be a next_cursor value from a jobs page",
                             code="invalid_request", field="cursor")
    return int(cursor)


def job_summary(entry: JobEntry) -> dict[str, Any]:
    """One row of a jobs page: identity, state and times, never the args."""
    job = read_state(entry)
    waiting = job.state in WAITING
    return {
        "id": job.id.hex(), "task": entry.task, "queue": entry.queue, "state": job.state,
        "attempt": job.attempt, "max_attempts": job.definition["max_attempts"],
        "durability": entry.durability, "inserted_at": job.inserted_at,
        "scheduled_at": job.eligible_at if waiting else None,
        "attempted_at": job.attempted_at, "completed_at": job.completed_at,
        "finished_at": job.terminal_at,
        "error_type": job.failure.get("type") if job.failure is not None else None,
        "schedule_id": entry.schedule_id,
    }


def _deletable(entry: JobEntry) -> None:
    """Refuse the deletion of a job that is not finished (``delete_rejected``)."""
    state = peek(entry).state
    if state not in DELETABLE:
        raise RequestRefused(f"a {state} job cannot be deleted (only completed, discarded or "
                             "cancelled ones: cancel it first)", code="delete_rejected",
                             job_id=peek(entry).id.hex(), state=state)


def _retry_event(entry: JobEntry, now_ms: int) -> ev.Event:
    """What retrying the job writes: a retryable one runs now at the same attempt, a
    discarded one starts a new cycle, a cancelled one is requeued, a scheduled one runs now;
    others are refused."""
    job = entry.state
    if job.state == "retryable":
        return ev.job_retried(job.id, now_ms, job.revision, ev.MODE_EXPEDITE)
    if job.state == "discarded":
        return ev.job_retried(job.id, now_ms, job.revision, ev.MODE_NEW_CYCLE)
    if job.state == "cancelled":
        return job_requeued(job.id, now_ms, job.revision)
    if job.state == "scheduled":
        return job_expedited(job.id, now_ms, job.revision)
    raise RequestRefused(f"a {job.state} job cannot be retried (only retryable, "
                         "discarded, cancelled or scheduled ones)", code="retry_rejected",
                         job_id=job.id.hex(), state=job.state)


class AdminCommands(ScheduleCommands):
    def _admin(self, cmd: Admin, now_ms: int, mono_ms: int, out: Outcome) -> None:
        handler = _OPS.get(cmd.op)
        if handler is None:
            raise RequestRefused(f"unknown admin operation {str(cmd.op)[:64]!r}",
                                 code="invalid_request", field="op")
        fields = handler(self, cmd.body, now_ms, out)
        self._reply(out, cmd.conn, cmd.request_id, f"admin_{cmd.op}", **fields)
        if cmd.op in _DISPATCHING:
            self._dispatch(now_ms, mono_ms, out)

    # ---- reads --------------------------------------------------------------------------

    def _admin_overview(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        request_fields(body, frozenset(), "overview")
        history = self.history
        executors = self.executors.executors.values()
        return {
            "jobs": {"total": self.job_count(), "by_state": {s: self.counts[s] for s in STATES}},
            "state_bytes": {"used": self.budget.used, "limit": self.budget.limit},
            "history": None if history is None else {
                "bytes": history.history_bytes, "limit": history.caps.max_history_bytes,
                "segments": history.segments, "segment_limit": history.caps.max_segments,
            },
            "admission": {"permits_in_use": self.permits.in_use, "permits": self.permits.slots,
                          "bytes_per_permit": self.permits.bytes_per_permit},
            "executing": sum(self._executing.values()),
            "paused_queues": sorted(self.paused),
            "quiet_workers": sum(1 for e in executors if e.quiet),
            "scaled_queues": dict(sorted(self.scaled.items())),
            "rate_limited_queues": {queue: {"starts": starts, "period_ms": period_ms}
                                    for queue, (starts, period_ms)
                                    in sorted(self.rates.limits.items())},
            "paused_schedules": sorted(self.schedules.paused),
            "connections": len(self.executors.executors),
            "executors": sum(1 for e in executors if e.mode != "client"),
            "capacity": sum(e.capacity for e in executors),
            "schedules": len(self.schedules),
            "next_sequence": self.next_sequence,
        }

    def _admin_jobs(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, _LISTING_FIELDS, "jobs")
        state = body.get("state")
        if state is not None and state not in STATES:
            raise RequestRefused(f"state must be one of {', '.join(STATES)}",
                                 code="invalid_request", field="state")
        queue, task = _optional_key(body, "queue"), _optional_key(body, "task")
        limit = _limit(body, PAGE_DEFAULT, PAGE_MAX)
        found, cursor = self._matching(state, queue, task, parse_args_filter(body),
                                       parse_error_filter(body), _stamp_cursor(body), limit,
                                       SCAN_LIMIT)
        jobs = self.jobs
        # a job held in columns is summarised from a detached entry: listing takes none out
        return {"jobs": [job_summary(jobs.get(job_id) or self._finished_entry(job_id))
                         for job_id in found],
                "next_cursor": None if cursor is None else str(cursor)}

    def _matching(self, state: str | None, queue: str | None, task: str | None,
                  args: dict[str, Any] | None, error: str | None, before: int | None,
                  limit: int, scan_limit: int) -> tuple[list[bytes], int | None]:
        """Up to ``limit`` ids of the jobs in ``state`` of ``queue`` running ``task`` whose
        args hold ``args`` and whose last failure holds ``error`` (case-folded; None: any),
        most recently changed first from the cursor ``before``, walking the smallest index
        of the filters for at most ``scan_limit`` entries (``CONTENT_SCAN_LIMIT`` with an args
        or error filter: each costs a decode); and the next cursor."""
        keys = [key for key in (("state", state), ("queue", queue), ("task", task))
                if key[1] is not None]
        index = self.job_index
        key = min(keys, key=index.size) if keys else ("all", "")
        jobs = self.jobs
        finished = self.finished
        texts = finished.texts

        def accept(job_id: bytes) -> bool:
            entry = jobs.get(job_id)
            if entry is None:  # held in columns: read there
                held, k = finished.where(job_id)
                return ((state is None or held.state(k) == state)
                        and (queue is None or held.text(k, QUEUE, texts) == queue)
                        and (task is None or held.text(k, WORKER, texts) == task))
            return ((state is None or peek(entry).state == state)
                    and (queue is None or entry.queue == queue)
                    and (task is None or entry.task == task))

        if args is None and error is None:
            return index.page(key, before, limit, accept, scan_limit)

        def accept_content(job_id: bytes) -> bool:  # the cheap filters first
            if not accept(job_id):
                return False
            job = read_state(jobs.get(job_id) or self._finished_entry(job_id))  # none taken out
            return ((args is None or args_match(job.definition["args"], args))
                    and (error is None or error_match(job.failure, error)))

        return index.page(key, before, limit, accept_content, min(scan_limit, CONTENT_SCAN_LIMIT))

    def _admin_job(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"job_id"}), "job")
        entry = self._lookup(body.get("job_id"))
        job = read_state(entry)
        definition = job.definition
        reservation = self.executors.reservations.get(entry.reservation_id or "")
        executor = (self.executors.executors.get(reservation.conn)
                    if reservation is not None else None)
        return {"job": {
            **job_summary(entry),
            "args": definition["args"],
            "timeout_ms": definition["timeout_ms"],
            "requested_at": definition["scheduled_at"],
            "revision": job.revision,
            "diagnostic": dict(job.diagnostic) if job.diagnostic is not None else None,
            "failure": dict(job.failure) if job.failure is not None else None,
            "result_present": job.result_present,
            "result": job.result if job.result_present else None,
            "attempts": [{"attempt": attempt, "started_at": started, "finished_at": finished,
                          "outcome": outcome}
                         for attempt, started, finished, outcome in timeline(entry) or ()],
            "running_on": None if executor is None else executor.runtime_id,
        }}

    def _admin_queues(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        request_fields(body, frozenset(), "queues")
        names = set(self.config.queues) | self.paused | set(self.scaled) | set(
            self.rates.limits) | {
            queue for queue, row in self.queue_counts.items() if any(row)}
        return {"queues": [self._queue_view(name, now_ms) for name in sorted(names)]}

    def _queue_view(self, name: str, now_ms: int) -> dict[str, Any]:
        row = self.queue_counts.get(name) or [0] * len(STATES)
        counts = dict(zip(STATES, row))
        oldest = self.oldest_ready_at(name)
        limit = self.rates.limits.get(name)
        held = None if limit is None else self.rates.held_until(name,
                                                                now_ms - self._clock_offset)
        return {"name": name, "paused": name in self.paused,
                "credits": self.queue_credits(name),
                "configured_credits": self.config.queue_credits(name),
                "scaled": name in self.scaled, "executing": self._executing[name],
                "rate_limit": None if limit is None else {"starts": limit[0],
                                                          "period_ms": limit[1]},
                # when its rate limit lets it start again, if the limit holds it back now
                "rate_limited_until": None if held is None else held + self._clock_offset,
                "waiting": sum(counts[s] for s in WAITING), "by_state": counts,
                "oldest_ready_at": oldest,
                "latency_ms": self.queue_latency_ms(name, now_ms)}

    def _admin_workers(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        request_fields(body, frozenset(), "workers")
        workers = [self._worker_view(e) for e in self.executors.executors.values()]
        workers.sort(key=lambda w: (w["transport"], w["runtime_id"]))
        return {"workers": workers, "unserved": self.unserved_tasks()}

    def _worker_view(self, executor: Executor) -> dict[str, Any]:
        """One connection: who, how much it may run, what it runs now, whether it is quiet."""
        return {
            "runtime_id": executor.runtime_id, "mode": executor.mode,
            "transport": "http" if executor.queue is not None else "socket",
            "queue": executor.queue, "capacity": executor.capacity,
            "in_flight": len(executor.reservations), "quiet": executor.quiet,
            "tasks": sorted(executor.tasks),
            "running": [self._running_view(r) for r in islice(executor.reservations.values(),
                                                              RUNNING_SHOWN)],
        }

    def _running_view(self, reservation: Any) -> dict[str, Any]:
        """One execution an executor holds (reservations keep their start order)."""
        entry = self.jobs[reservation.job_id]  # executing: a live entry, never in columns
        job = read_state(entry)
        return {"job_id": job.id.hex(), "task": entry.task, "queue": reservation.queue,
                "attempt": job.attempt, "started_at": job.attempted_at,
                # the deadline is kept on the monotonic clock: as wall time for the reader
                "timeout_at": reservation.deadline_mono + self._clock_offset}

    def _admin_tasks(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """What each (queue, task) did since start (``window: start``, the default) or in
        the last hour (``hour``): counts by outcome and its executions' run times
        (histogram, mean, quantiles), the busiest first; and how many connected executors
        registered the task."""
        body = request_fields(body, frozenset({"limit", "window"}), "tasks")
        limit = _limit(body, TASKS_DEFAULT, TASKS_MAX)
        window = body.get("window", "start")
        if window == "start":
            counted = self.activity.runs()
        elif window == "hour":
            self.sample_queues(now_ms)  # the current minute up to date
            counted = self.task_hour.runs(now_ms)
        else:
            raise RequestRefused("window must be start or hour", code="invalid_request",
                                 field="window")
        by_task = self.executors.by_task
        rows = []
        for queue, task, counts, histogram, total_ms in counted:
            runs = sum(histogram)
            rows.append({
                "queue": queue, "task": task, **dict(zip(OUTCOMES, counts)),
                "runs": runs, "run_ms_total": total_ms,
                "run_ms_mean": total_ms // runs if runs else None,
                **{f"run_ms_p{q}": _at_most(histogram, runs, q) for q in (50, 95, 99)},
                "run_histogram": histogram,
                "executors": len(by_task.get(task, ())),
            })
        rows.sort(key=lambda row: (-row["runs"] - row["enqueued"], row["queue"], row["task"]))
        return {"window": window, "tasks": rows[:limit], "more": len(rows) > limit,
                "run_bounds_ms": list(RUN_BOUNDS_MS),
                # pairs counted one by one; later ones share the row of queue and task ""
                "pairs_max": PAIRS_MAX}

    def unserved_tasks(self) -> list[dict[str, Any]]:
        """Ready jobs whose task no connected executor has registered (per queue)."""
        found = []
        for queue in self._ready.queues():
            for task, head in self._ready.heads(queue):
                if task not in self.executors.by_task:
                    found.append({"queue": queue, "task": task, "oldest_ready_at": head[0]})
        return found

    def _admin_schedules(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"limit", "cursor"}), "schedules")
        objects, next_cursor = self.schedules.page(body.get("limit"), body.get("cursor"),
                                                   self.schedule_job_state)
        objects = [self._schedule_view(obj) for obj in objects]
        objects, next_cursor = self._fit_page(objects, next_cursor, None)
        return {"schedules": objects, "next_cursor": next_cursor}

    def _admin_schedule(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"schedule_id"}), "schedule")
        return {"schedule": self._schedule_view(
            self.schedules.status(body.get("schedule_id"), self.schedule_job_state))}

    def _schedule_view(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A public schedule object plus its next due times and the job of its last one."""
        state = self.schedules.get(obj["id"])
        obj["paused"] = state.schedule_id in self.schedules.paused
        obj["next_occurrences"] = _next_occurrences(state.definition, obj["next_at"])
        last_job = self._entry(_occurrence_id(obj["id"], state.last_at))
        obj["last_job"] = None if last_job is None else {
            "id": peek(last_job).id.hex(), "state": peek(last_job).state}
        return obj

    def _admin_activity(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"limit"}), "activity")
        limit = _limit(body, FAILURES_MAX, FAILURES_MAX)
        self.sample_queues(now_ms)
        return {"per_minute": self.activity.per_minute(now_ms),
                "failures": self.activity.recent_failures(now_ms - FAILURE_WINDOW_MS, limit),
                "queue_latency": self.latency.per_minute(now_ms, LATENCY_SERIES_MAX),
                "queue_throughput": self.throughput.per_minute(now_ms, LATENCY_SERIES_MAX)}

    def _admin_history(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """What each of the last ``days`` UTC days saw (default 30), oldest first, today
        last: durable across restarts (``tay.engine.day_history``)."""
        body = request_fields(body, frozenset({"days"}), "history")
        days = _limit(body, HISTORY_DAYS_DEFAULT, HISTORY_DAYS_MAX, "days")
        totals = self.day_history.totals(self.activity.days())
        return {"days": last_days(totals, now_ms // DAY_MS, days),
                "recorded_days": len(self.day_history.recorded)}

    def _admin_record_days(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """The server's: a (32,2) for each day counted since its last record. The history
        caps may refuse one (capacity); the rest wait for the next call."""
        recorded = 0
        for event in self.day_history.unrecorded(self.activity.days(), now_ms):
            try:
                self._commit_control(event, out)
            except RequestRefused:
                break
            recorded += 1
        return {"recorded": recorded}

    # ---- actions ------------------------------------------------------------------------

    def _admin_retry_job(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"job_id"}), "retry_job")
        entry = self._lookup(body.get("job_id"))
        self._commit(entry, _retry_event(entry, now_ms), entry.volatile, out)
        return {"job": job_summary(entry)}

    def _admin_retry_jobs(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """``retry_job`` for up to ``limit`` jobs in one state (and queue, task), most
        recently changed first from ``cursor``. ``next_cursor`` (None: no more) continues
        with the jobs that were older than these: a job retried now, or one that failed
        back into the state meanwhile, has changed since and is not visited again, so
        following the cursors ends."""
        reply, entries = self._bulk_page(body, "retry_jobs", RETRIABLE)
        events = [_retry_event(entry, now_ms) for entry in entries]
        # all the retries pass the history caps together, or the request is refused whole
        self._history_check([event for entry, event in zip(entries, events)
                             if not entry.volatile])
        for entry, event in zip(entries, events):
            self._commit(entry, event, entry.volatile, out)
        return {**reply, "retried": len(entries)}

    def _admin_cancel_jobs(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """``cancel_job`` for up to ``limit`` jobs in one cancellable state (and queue,
        task), most recently changed first from ``cursor``; ``next_cursor`` continues with
        the older ones, as ``retry_jobs``' does. Running ones are told to stop."""
        reply, entries = self._bulk_page(body, "cancel_jobs", CANCELLABLE)
        self._cancel_jobs(entries, now_ms, out)
        return {**reply, "cancelled": len(entries)}

    def _bulk_page(self, body: Any, op: str, states: tuple[str, ...]
                   ) -> tuple[dict[str, Any], list[JobEntry]]:
        """``_bulk_ids`` with the jobs' entries (held ones come out of their columns), the
        ones still rows built together (``captured_states``): the action reads each
        state, and one row at a time costs a decode and a reducer each."""
        reply, found = self._bulk_ids(body, op, states)
        entries = [self._entry(job_id) for job_id in found]
        rows = [entry for entry in entries if type(entry) is LazyJobEntry]
        if len(rows) > 1:
            built = captured_states([STATE_SLOT.__get__(entry) for entry in rows])
            for entry, job in zip(rows, built):
                entry.state = job  # as reading it would: a plain entry from now on
        return reply, entries

    def _bulk_ids(self, body: Any, op: str, states: tuple[str, ...]
                  ) -> tuple[dict[str, Any], list[bytes]]:
        """What ``retry_jobs``, ``cancel_jobs`` and ``delete_jobs`` act on: the request's
        state (one of ``states``), queue, task, args and error, and the ids of up to
        ``limit`` jobs that match, most recently changed first from ``cursor``; the reply's
        fields so far."""
        body = request_fields(body, _LISTING_FIELDS, op)
        state = body.get("state")
        if state not in states:
            raise RequestRefused("state must be one of " + ", ".join(states),
                                 code="invalid_request", field="state")
        queue, task = _optional_key(body, "queue"), _optional_key(body, "task")
        args, error = parse_args_filter(body), parse_error_filter(body)
        limit = _limit(body, BULK_DEFAULT, BULK_MAX)
        found, cursor = self._matching(state, queue, task, args, error, _stamp_cursor(body),
                                       limit, self.job_count() + 1)
        return ({"state": state, "queue": queue, "task": task, "args": args,
                 "error": body.get("error"),
                 "next_cursor": None if cursor is None else str(cursor)}, found)

    def _cancel_jobs(self, entries: list[JobEntry], now_ms: int, out: Outcome) -> None:
        """Cancel ``entries``: the waiting ones' cancels pass the history caps together
        first, or the request is refused whole (a running one's is only accounted: it ends
        an execution)."""
        self._history_check([ev.job_cancelled(entry.state.id, now_ms, entry.state.revision,
                                              None)
                             for entry in entries
                             if not entry.volatile and entry.state.state != "executing"])
        for entry in entries:
            self._cancel_job(entry, now_ms, out)

    def _admin_cancel_job(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"job_id"}), "cancel_job")
        entry = self._lookup(body.get("job_id"))
        self._cancel_unless_cancelled(entry, now_ms, out)
        return {"job": job_summary(entry)}

    def _admin_delete_job(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"job_id"}), "delete_job")
        entry = self._lookup(body.get("job_id"))
        summary = job_summary(entry)  # what the job was, for the reply and the trail
        _deletable(entry)
        self.delete_job(entry, now_ms, out)
        return {"job": summary, "deleted": True}

    def _admin_delete_jobs(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """``delete_job`` for up to ``limit`` jobs in one finished state (and queue, task,
        args), most recently changed first from ``cursor``, the cursor followed as
        ``retry_jobs``'. The deletions pass the history caps together or none is made."""
        reply, found = self._bulk_ids(body, "delete_jobs", DELETABLE)
        # a job held finished in columns or packed is deleted as it is held, its revision
        # read in place: not built first (a page of them would hold the loop ~0.1 ms each)
        entries = [self.jobs.get(job_id) for job_id in found]
        events = [job_deleted(job_id, now_ms, self.held_revision(job_id) if entry is None
                              else peek(entry).revision)
                  for job_id, entry in zip(found, entries)]
        self._history_check([event for entry, event in zip(entries, events)
                             if entry is None or not entry.volatile])
        for entry, event in zip(entries, events):
            if entry is None:
                self.commit_held_deletion(event, out)
            else:
                self._commit(entry, event, entry.volatile, out)  # dropped as it installs
        return {**reply, "deleted": len(found)}

    def _admin_quiet_worker(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        return self._set_quiet(body, "quiet_worker", True)

    def _admin_unquiet_worker(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        return self._set_quiet(body, "unquiet_worker", False)

    def _set_quiet(self, body: Any, op: str, quiet: bool) -> dict[str, Any]:
        """The worker's connections are offered nothing new (``quiet``), or work again. A
        runtime id with no worker connected (a producer's does not count) is ``not_found``,
        except that an unquiet forgets a quiet one that is away."""
        runtime_id = request_fields(body, frozenset({"runtime_id"}), op).get("runtime_id")
        if not is_identifier(runtime_id):
            raise RequestRefused("runtime_id must be 1..128 bytes without NUL",
                                 code="invalid_request", field="runtime_id")
        executors = self.executors
        workers = [e for e in executors.of_runtime(runtime_id) if e.mode != "client"]
        if not workers and (quiet or runtime_id not in executors.quiet):
            raise RequestRefused(f"no worker with runtime_id {runtime_id!r} is connected",
                                 code="not_found", runtime_id=runtime_id)
        executors.set_quiet(runtime_id, quiet)
        return {"runtime_id": runtime_id, "quiet": quiet,
                "workers": [self._worker_view(e) for e in workers]}

    def _admin_pause_queue(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        queue = _key(request_fields(body, frozenset({"queue"}), "pause_queue"), "queue")
        if queue not in self.paused:
            self._commit_control(queue_paused(queue, now_ms), out)
        return {"queue": self._queue_view(queue, now_ms)}

    def _admin_resume_queue(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        queue = _key(request_fields(body, frozenset({"queue"}), "resume_queue"), "queue")
        if queue in self.paused:
            self._commit_control(queue_resumed(queue, now_ms), out)
        return {"queue": self._queue_view(queue, now_ms)}

    def _admin_limit_queue(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        """At most ``starts`` job starts in any ``period_ms`` from now on (both null: no
        limit); durable, like a pause."""
        body = request_fields(body, frozenset({"queue", "starts", "period_ms"}), "limit_queue")
        queue = _key(body, "queue")
        if "starts" not in body or "period_ms" not in body:
            raise RequestRefused("starts and period_ms are required (integers, or both null "
                                 "for no limit)", code="invalid_request",
                                 field="starts" if "starts" not in body else "period_ms")
        starts, period_ms = body["starts"], body["period_ms"]
        if (starts is None) != (period_ms is None):
            raise RequestRefused("starts and period_ms are both integers, or both null for no "
                                 "limit", code="invalid_request", field="starts")
        for field, value, high in (("starts", starts, RATE_STARTS_MAX),
                                   ("period_ms", period_ms, RATE_PERIOD_MAX_MS)):
            if value is not None and (type(value) is not int or not 1 <= value <= high):
                raise RequestRefused(f"{field} must be an integer in 1..{high:,}",
                                     code="invalid_request", field=field)
        current = self.rates.limits.get(queue)
        if current != (None if starts is None else (starts, period_ms)):  # else no event
            self._commit_control(queue_rate_limited(queue, starts, period_ms, now_ms), out)
        return {"queue": self._queue_view(queue, now_ms)}

    def _admin_scale_queue(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"queue", "concurrency"}), "scale_queue")
        queue = _key(body, "queue")
        if "concurrency" not in body:
            raise RequestRefused("concurrency is required (an integer, or null for the "
                                 "configured credits)", code="invalid_request",
                                 field="concurrency")
        concurrency = body["concurrency"]
        if concurrency is not None and (type(concurrency) is not int
                                        or not 1 <= concurrency <= QUEUE_CREDITS_MAX):
            raise RequestRefused(f"concurrency must be an integer in 1..{QUEUE_CREDITS_MAX}, "
                                 "or null for the configured credits", code="invalid_request",
                                 field="concurrency")
        if self.scaled.get(queue) != concurrency:  # else nothing changes: no event
            self._commit_control(queue_scaled(queue, concurrency, now_ms), out)
        return {"queue": self._queue_view(queue, now_ms)}

    def _admin_purge_queue(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"queue", "limit"}), "purge_queue")
        queue = _key(body, "queue")
        limit = _limit(body, PURGE_DEFAULT, PURGE_MAX)
        jobs = self.jobs
        finished = self._finished_ids  # held in columns: finished, never waiting
        found, _ = self.job_index.page(("queue", queue), None, limit,
                                       lambda job_id: job_id not in finished
                                       and peek(jobs[job_id]).state in WAITING,
                                       self.job_count() + 1)
        self._cancel_jobs([jobs[job_id] for job_id in found], now_ms, out)
        purged = len(found)
        view = self._queue_view(queue, now_ms)
        return {"queue": view, "purged": purged, "remaining": view["waiting"]}

    def _admin_run_schedule(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"schedule_id"}), "run_schedule")
        state = self.schedules.require(body.get("schedule_id"))
        definition = state.definition
        # an enqueue of the definition, with no reply of its own (no conn, no request id);
        # it dispatches like any enqueue (the monotonic clock as handle() was given it)
        entry = self._enqueue(Enqueue(None, None, definition["task"], dict(definition["args"]),
                                      dict(definition["options"])),
                              now_ms, now_ms - self._clock_offset, out)
        return {"schedule": self._schedule_view(self.schedules.status(
                    state.schedule_id, self.schedule_job_state)),
                "job": job_summary(entry)}

    def _admin_pause_schedule(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"schedule_id"}), "pause_schedule")
        state = self.schedules.require(body.get("schedule_id"))
        if state.schedule_id not in self.schedules.paused:
            if state.cancelled:
                raise RequestRefused("a cancelled schedule cannot be paused",
                                     code="schedule_conflict", schedule_id=state.schedule_id)
            self._commit_control(schedule_paused(state.schedule_id, now_ms), out)
        return {"schedule": self._schedule_view(
            self.schedules.status(state.schedule_id, self.schedule_job_state))}

    def _admin_resume_schedule(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"schedule_id"}), "resume_schedule")
        schedule_id = self.schedules.require(body.get("schedule_id")).schedule_id
        if schedule_id in self.schedules.paused:
            skip = self.schedules.skip_missed(schedule_id, now_ms, self.schedule_job_state)
            resumed = schedule_resumed(schedule_id, now_ms)
            # both pass the history caps together; the skip goes first, so that a resume
            # applied is never followed by the backlog it was to skip
            self._history_check([resumed] if skip is None else [skip, resumed])
            if skip is not None:
                self._commit_schedule(skip, out)
            self._commit_control(resumed, out)
        return {"schedule": self._schedule_view(
            self.schedules.status(schedule_id, self.schedule_job_state))}

    def _admin_cancel_schedule(self, body: Any, now_ms: int, out: Outcome) -> dict[str, Any]:
        body = request_fields(body, frozenset({"schedule_id"}), "cancel_schedule")
        schedule_id = body.get("schedule_id")
        event = self.schedules.cancel(schedule_id, now_ms)  # None: already cancelled
        if event is not None:
            self._commit_schedule(event, out)
        return {"schedule": self._schedule_view(
            self.schedules.status(schedule_id, self.schedule_job_state))}

    # ---- queue and schedule control (live and replay) -------------------------------------

    def _commit_control(self, event: ev.Event, out: Outcome) -> None:
        if self.epoch is not None:  # Store v2: a (30,2) record on the entity's chain
            self._commit_entity(event, out)
            return
        sequence = self.next_sequence
        event = self._charge_history(event)  # an admission: may refuse, changing nothing
        self._apply_control(event)
        self.next_sequence += 1
        out.events.append((sequence, event))

    def _apply_control(self, event: ev.Event) -> None:
        if event.pair == ev.DAY_TOTALS:  # what this life counted of the day is in it now
            self.day_history.apply(event, self.activity.days().get(event["day"]))
            return
        if event.pair in SCHEDULE_CONTROL_PAIRS:
            self.schedules.set_paused(event["schedule_id"], event.pair == ev.SCHEDULE_PAUSED)
            return
        queue = event["queue"]
        if event.pair == ev.QUEUE_PAUSED:
            self.paused.add(queue)
        elif event.pair == ev.QUEUE_RESUMED:
            self.paused.discard(queue)
        elif event.pair == ev.QUEUE_RATE_LIMITED:  # both null: no limit
            self.rates.set(queue, event["starts"], event["period_ms"])
        else:  # QUEUE_SCALED: null returns the queue to its configured credits
            if event["concurrency"] is None:
                self.scaled.pop(queue, None)
            else:
                self.scaled[queue] = event["concurrency"]
            self.credit_limits = {**self.config.queues, **self.scaled}


def _at_most(histogram: list[int], runs: int, percent: int) -> int | None:
    """The run time that ``percent`` % of the runs took at most, as the upper bound of the
    histogram bucket it falls in (None: no runs, or past the largest bound)."""
    if not runs:
        return None
    wanted, seen = -(-runs * percent // 100), 0  # the rank, rounded up
    for bound, count in zip(RUN_BOUNDS_MS, histogram):
        seen += count
        if seen >= wanted:
            return bound
    return None


def _next_occurrences(definition: Any, next_at: int | None) -> list[int]:
    """The next few due times of a schedule, starting at its stored next one."""
    if next_at is None:
        return []
    timing = schedule_timing.Timing.of(definition)
    times = [next_at]
    while len(times) < NEXT_OCCURRENCES:
        following = timing.following(times[-1])
        if following is None:
            break
        times.append(following)
    return times


def _occurrence_id(schedule_id: str, due_at: int | None) -> bytes:
    return b"" if due_at is None else schedule_timing.occurrence_job_id(schedule_id, due_at)


_OPS: dict[str, Callable[..., dict[str, Any]]] = {
    "overview": AdminCommands._admin_overview,
    "jobs": AdminCommands._admin_jobs,
    "job": AdminCommands._admin_job,
    "queues": AdminCommands._admin_queues,
    "workers": AdminCommands._admin_workers,
    "tasks": AdminCommands._admin_tasks,
    "schedules": AdminCommands._admin_schedules,
    "schedule": AdminCommands._admin_schedule,
    "activity": AdminCommands._admin_activity,
    "history": AdminCommands._admin_history,
    "record_days": AdminCommands._admin_record_days,
    "retry_job": AdminCommands._admin_retry_job,
    "retry_jobs": AdminCommands._admin_retry_jobs,
    "cancel_job": AdminCommands._admin_cancel_job,
    "cancel_jobs": AdminCommands._admin_cancel_jobs,
    "delete_job": AdminCommands._admin_delete_job,
    "delete_jobs": AdminCommands._admin_delete_jobs,
    "quiet_worker": AdminCommands._admin_quiet_worker,
    "unquiet_worker": AdminCommands._admin_unquiet_worker,
    "pause_queue": AdminCommands._admin_pause_queue,
    "resume_queue": AdminCommands._admin_resume_queue,
    "scale_queue": AdminCommands._admin_scale_queue,
    "limit_queue": AdminCommands._admin_limit_queue,
    "purge_queue": AdminCommands._admin_purge_queue,
    "cancel_schedule": AdminCommands._admin_cancel_schedule,
    "pause_schedule": AdminCommands._admin_pause_schedule,
    "resume_schedule": AdminCommands._admin_resume_schedule,
    "run_schedule": AdminCommands._admin_run_schedule,
}
ADMIN_OPS = frozenset(_OPS)
_DISPATCHING = frozenset({"retry_job", "retry_jobs", "cancel_job", "cancel_jobs",
                          "resume_queue", "unquiet_worker",
                          "scale_queue", "limit_queue", "purge_queue"})
