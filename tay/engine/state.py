"""The engine's state and its one mutation path: build event -> ``apply`` -> re-index.

Live commands and recovery replay both end in ``_install`` after
``tay.storage.events.transitions.apply``, so the durable state a replay reproduces is, by
construction, the state the live engine had. Persistent events take the next record
sequence (``next_sequence``) and go into the Outcome; volatile jobs run through the same
``apply`` with a private revision counter and never produce events.

In a Store-v2 epoch, a persistent insert, start and nil-result success take a fused commit
instead (``tay.engine.epoch``): the same records, state and index changes built in one
function, proven equal to this path by tests/engine/test_fused_commits.py. Replay and
every other live change stay on this path.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tay.engine.activity import Activity, QueueLatency, QueueThroughput, TaskHour
from tay.engine.day_history import DayHistory
from tay.engine.rates import RateLimits
from tay.engine.admission import ClientPermits, StateBudget, job_charge, jobs_charge
from tay.engine.config import EngineConfig
from tay.engine.effects import Execute, Outcome
from tay.engine.retained.execute_args import ExecuteArgs
from tay.engine.executors import Executor, ExecutorRegistry, Reservation
from tay.engine.retained.finished import FinishedJobs, charges
from tay.engine.validation.ids import BufferedSystemRandom, RandomSource, random_token
from tay.engine.retained.job_index import JobIndex
from tay.engine.retained.jobs import (
    JobEntry, LazyJobEntry, index_keys_for, peek, read_state, timeline,
)
from tay.engine.retained import packed as packing
from tay.engine.validation.options import DEFINITION_FIXED_NODES
from tay.engine.ready import DueHeap, ReadyIndex
from tay.engine.validation.values import measure
from tay.failures import RequestRefused
from tay.storage import events as ev
from tay.storage.events.definition import TIMEOUT_MS, LazyDefinition, args_json
from tay.storage.events.operations import job_deleted
from tay.storage.journal.history_budget import HistoryBudget, frame_size
from tay.storage.v2.rows import BaseJobs, BaseLiveRow, JobRow
from tay.storage.v2.tail import ExecutingRow, FailedRow, LiveRow, RetriedRow, TailJobs
from tay._native import _pure_base as bj
from tay.storage.events.transitions import (
    STATES, TERMINAL_STATES, JobState, apply, deletes, expected_finish, retry_due_range,
)

WAITING_FOR_TIME = ("scheduled", "retryable")
RATE_SEED_SCAN = 10_000  # jobs of a rate-limited queue a restart reads for recent starts
_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
STATE_INDEX = {state: index for index, state in enumerate(STATES)}
_EXECUTING = STATE_INDEX["executing"]
MAX_TIMELINE = 25  # attempts kept per job for the admin timeline (the latest ones)
# The records that end an execution: written against its finishing reserve, never refused
# by the history caps (a job can always finish). Every other record is an admission.
FINISHING = frozenset({ev.JOB_FINISHED, ev.RESULT_RECORDED, ev.FAILURE_RECORDED})


class StateCounts(Mapping[str, int]):
    """Jobs per state, read from the queue rows (``EngineState.queue_counts``: a queue's
    jobs per state in ``STATES`` order) when asked. The rows are the one record of the
    counts: the per-job paths move a row's two cells and nothing else, and the readers
    (metrics, ``tay status``, the admin stats, the start-up log) sum the rows, one per
    queue, when they read."""

    __slots__ = ("_rows",)

    def __init__(self, rows: dict[str, list[int]]) -> None:
        self._rows = rows

    def __getitem__(self, state: str) -> int:
        index = STATE_INDEX[state]
        return sum(row[index] for row in self._rows.values())

    def __iter__(self) -> Iterator[str]:
        return iter(STATES)

    def __len__(self) -> int:
        return len(STATES)

    def __repr__(self) -> str:
        return f"StateCounts({dict(self)!r})"


def definition_nodes(definition: Mapping[str, Any]) -> int:
    """Nodes the state budget charges; a replayed definition knows its args count already."""
    if type(definition) is LazyDefinition:
        return definition.args_nodes + DEFINITION_FIXED_NODES
    return measure(definition["args"], "args").nodes + DEFINITION_FIXED_NODES


class JobTable(dict):
    """The engine's jobs by id. ``[]`` of a finished job still held in columns
    (tay.engine.retained.finished) takes it out first, so it is found like any other;
    ``get``, ``in``, ``len`` and iteration see only the jobs out of the columns: the engine
    looks jobs up through ``EngineState._entry`` and counts them with ``job_count``."""

    __slots__ = ("thaw",)

    def __missing__(self, job_id: bytes) -> JobEntry:
        entry = self.thaw(job_id)
        if entry is None:
            raise KeyError(job_id)
        return entry


class EngineState:
    fused = False  # the fused per-job commits (Store v2 only: tay.engine.epoch)

    def __init__(self, config: EngineConfig | None = None, rng: RandomSource | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self.rng: RandomSource = rng if rng is not None else BufferedSystemRandom()
        self.next_sequence = 1
        self._volatile_sequence = 1
        self.jobs: dict[bytes, JobEntry] = JobTable()
        self.jobs.thaw = self._thaw
        # finished base jobs not touched since the restart, in their columns
        self.finished = FinishedJobs()
        self._finished_ids = self.finished.stamps
        # job id -> the schedule that admitted it, for a job a delivery named while it had
        # no entry: held in columns (or, in a tail's replay, installed later as a row); the
        # entry made of it takes the link (``link_schedule``)
        self.schedule_links: dict[bytes, str] = {}
        self.executors = ExecutorRegistry(self.config.settled_memory)
        self.budget = StateBudget(self.config.max_state_bytes)
        self.permits = ClientPermits(self.config)
        self._ready = ReadyIndex(self._ready_live)
        self._timers = DueHeap(self._timer_live)
        self._timeouts = DueHeap(self._timeout_live)
        self._executing: Counter[str] = Counter()
        self._ready_counter = 0
        self._clock_offset = 0  # last seen now_ms - mono_ms, to map wall due times to mono
        self.history: HistoryBudget | None = None  # attached by the server after recovery
        self.durable_executing = 0  # persistent jobs executing: each holds a history reserve
        # operations (docs/admin.md): paused queues (durable), the admin job index, job
        # counts per (queue, state), and what happened since start (volatile)
        self.paused: set[str] = set()
        # a queue's credits set at runtime (``scale_queue``, durable (24,2)) and what
        # dispatch reads: the configured credits with those on top
        self.scaled: dict[str, int] = {}
        self.credit_limits: dict[str, int] = dict(self.config.queues)
        self.rates = RateLimits()  # a queue's rate limit (``limit_queue``, durable (28,2))
        self.dispatching = True  # False while the server drains for shutdown (volatile)
        self._stamp = 0
        self._job_index: JobIndex | None = JobIndex(self._stamp_of)  # None: built on use
        self.queue_counts: dict[str, list[int]] = {}  # queue -> job counts in STATES order
        # jobs per state: the queue rows' sums, read when asked (kept nowhere else)
        self.counts: Mapping[str, int] = StateCounts(self.queue_counts)
        self.activity = Activity()
        self.day_history = DayHistory()  # durable: (32,2) records the server has written
        self.latency = QueueLatency()  # volatile, like activity: sample_queues feeds it
        self.throughput = QueueThroughput()  # and this, from activity's counts
        self.task_hour = TaskHour()  # and this, from activity's rows
        # Store v2 (tay.engine.epoch): the epoch's reducer once the store is v2, else None
        self.epoch: Any = None
        self._pending_nodes: int | None = None  # a live insert's measured nodes
        self.execute_args = ExecuteArgs(self._may_dispatch)  # enqueues' args JSON, kept
        # for their dispatch
        # ids of jobs that finished (or were taken out finished) since packing started, in
        # that order, for ``pack_finished``; None: packing is off (replay, tests, tools)
        self.finishing: deque[bytes] | None = None
        self._pack_round = 0  # how many of ``finishing`` the current packing round takes
        # ids of jobs that began to wait (for a dispatch or their due time) since parking
        # started, in that order, for ``park_waiting``; None: parking is off
        self.parking: deque[bytes] | None = None
        self._park_round = 0  # how many of ``parking`` the current parking round takes
        # ids of volatile jobs as they finished, for ``expire_volatile`` (they are in no
        # store, so no compaction expires them)
        self.volatile_finished: deque[bytes] = deque()

    def defer_job_index(self) -> None:
        """Replay is about to start: stamp jobs but build the admin index only when it is
        first used (one entry per job instead of one per replayed transition)."""
        if self.jobs or self.finished:
            raise RuntimeError("the job index can only be deferred before any job exists")
        self._job_index = None

    @property
    def job_index(self) -> JobIndex:
        index = self._job_index
        if index is None:
            rows = [(entry.stamp, job_id, peek(entry).state, entry.index_keys)
                    for job_id, entry in self.jobs.items()]
            stamps = self._finished_ids
            texts = self.finished.texts
            for jobs, k in self.finished.held():
                job_id = jobs.job_id(k)
                rows.append((stamps[job_id], job_id, jobs.state(k), index_keys_for(
                    jobs.text(k, bj.QUEUE, texts), jobs.text(k, bj.WORKER, texts))))
            index = self._job_index = JobIndex.build(self._stamp_of, rows)
        return index

    def oldest_ready_at(self, queue: str) -> int | None:
        """When the longest-waiting ready job of ``queue`` became ready (None: none is);
        ``tay.engine.ready.ReadyIndex.oldest_ready_at``."""
        return self._ready.oldest_ready_at(queue)

    def queue_latency_ms(self, queue: str, now_ms: int) -> int:
        """How long the longest-waiting ready job of ``queue`` has waited at ``now_ms``
        (0: none is ready): the queue's latency in rows, metrics and the latency history."""
        oldest = self._ready.oldest_ready_at(queue)
        return 0 if oldest is None else max(0, now_ms - oldest)

    def queue_credits(self, queue: str) -> int:
        """Executions ``queue`` may run at once: its scaled credits, else the configured
        ones, else the default (what ``_dispatch`` reads, inline)."""
        return self.credit_limits.get(queue, self.config.default_queue_concurrency)

    def sample_queues(self, now_ms: int) -> None:
        """Record each queue's latency now in ``latency``, what it finished since the last
        sample in ``throughput`` and what each task did in ``task_hour`` (the server calls
        it every few seconds; an ``activity`` or ``tasks`` read too). Reads the heads of
        the ready heaps and the activity counts, never the jobs."""
        self.latency.sample(now_ms, [
            (queue, latency) for queue in self._ready.queues()
            if (latency := self.queue_latency_ms(queue, now_ms))])
        self.throughput.sample(now_ms, self.activity.queue_totals())
        self.task_hour.sample(now_ms, self.activity.rows())
        # a queue's counts row with no job left in it: dropped, so names used once do not
        # stay for life (no entry refers to it: every retained job counts in its row)
        for queue in [queue for queue, row in self.queue_counts.items() if not any(row)]:
            del self.queue_counts[queue]

    def job_count(self) -> int:
        """Jobs retained, persistent and volatile."""
        return len(self.jobs) + len(self.finished)

    def _entry(self, job_id: bytes) -> JobEntry | None:
        """The job's entry (taken out of the columns if it was held there), else None."""
        entry = self.jobs.get(job_id)
        if entry is None and job_id in self._finished_ids:
            entry = self._thaw(job_id)
        return entry

    def held_revision(self, job_id: bytes) -> int:
        """The revision of a job held finished without an entry (in columns or packed),
        read in place."""
        held, k = self.finished.where(job_id)
        return held.revision(k)

    def link_schedule(self, job_id: bytes, schedule_id: str) -> None:
        """Name the schedule whose delivery admitted the job (the admin job view shows it):
        on its entry, or, for a job without one (held in columns, or one a tail's replay
        installs after the delivery), in ``schedule_links`` until an entry is made of it
        or it leaves. A job is not taken out of its columns for this."""
        entry = self.jobs.get(job_id)
        if entry is not None:
            entry.schedule_id = schedule_id
            self.schedule_links.pop(job_id, None)
            return
        packed = self.finished.packed.get(job_id)
        if packed is not None:
            self.finished.packed[job_id] = packing.linked(packed, schedule_id)
            return
        self.schedule_links[job_id] = schedule_id

    def _finished_entry(self, job_id: bytes) -> JobEntry | None:
        """A job held in columns as the entry the row install makes of it (the same
        charge, margin, stamp and queue counts row), or a packed job as the entry it was,
        not taken out; None when not held."""
        packed = self.finished.packed.get(job_id)
        if packed is not None:
            return packing.unpack(packed, self._finished_ids[job_id],
                                  self.queue_counts[packed[packing.QUEUE]])
        found = self.finished.row(job_id)
        if found is None:
            return None
        row, stamp, charge, margin = found
        entry = LazyJobEntry(row, charge)
        entry.margin = margin
        entry.stamp = stamp
        entry.attempts = row.attempts  # a tail job's timeline (a base job's is empty)
        entry.queue_row = self.queue_counts[entry.queue]
        if self.schedule_links:
            entry.schedule_id = self.schedule_links.get(job_id)
        return entry

    def _thaw(self, job_id: bytes) -> JobEntry | None:
        """Take a job out of the columns: from now on it is an ordinary entry."""
        entry = self._finished_entry(job_id)
        if entry is not None:
            self.finished.remove(job_id)
            self.schedule_links.pop(job_id, None)  # the entry holds it now
            dict.__setitem__(self.jobs, job_id, entry)
            if self.finishing is not None:  # packed again later if it stays finished
                self.finishing.append(job_id)
        return entry

    # ---- volatile finished jobs expire on their own ---------------------------------

    def expire_volatile(self, retention: Any, now_ms: int) -> int:
        """Drop the volatile jobs that finished long enough ago to expire under
        ``retention`` (a ``tay.storage.v2.manifest.Retention``: the store's terminal
        retention, judged at ``now_ms`` as a compaction judges persistent jobs at its
        capture). They are in no store, so no compaction expires them; without this they
        would hold their budget charge until the process stops. Oldest first; returns how
        many were dropped."""
        finished = self.volatile_finished
        dropped = 0
        while finished:
            job_id = finished[0]
            entry = self.jobs.get(job_id)
            job = peek(entry) if entry is not None else None
            if job is None or not entry.volatile or not job.terminal:
                finished.popleft()  # gone, or retried since: back when it finishes again
                continue
            if not retention.expires(job.terminal_at, now_ms):
                break
            finished.popleft()
            self.remove_job(job_id)  # as a deletion: the id is free, its timers stale
            dropped += 1
        return dropped

    def delete_job(self, entry: JobEntry, now_ms: int, out: Outcome) -> None:
        """Delete a finished job by hand: a (29,2) ``job_deleted`` through the one commit
        path (durable unless the job is volatile), whose install drops the job
        (``_install_or_drop``). A job that is not finished is refused by the caller."""
        job = entry.state
        self._commit(entry, job_deleted(job.id, now_ms, job.revision), entry.volatile, out)

    def seed_rate_logs(self, now_ms: int) -> None:
        """After recovery: each rate-limited queue's log holds the starts its retained jobs
        recorded in the period (each job's attempt timeline, else its last start), read
        from the newest jobs of the queue, at most ``RATE_SEED_SCAN`` of them (four per
        allowed start, at least 1,000), so a restart does not give the queue a fresh
        allowance (tay.engine.rates)."""
        if not self.rates.limits:
            return
        index, jobs = self.job_index, self.jobs
        for queue, (starts, period_ms) in self.rates.limits.items():
            since = now_ms - period_ms
            found: list[int] = []

            def collect(job_id: bytes) -> bool:
                entry = jobs.get(job_id) or self._finished_entry(job_id)
                attempts = timeline(entry)
                if attempts:
                    found.extend(started for _, started, _, _ in attempts
                                 if started is not None and started > since)
                else:
                    at = read_state(entry).attempted_at
                    if at is not None and at > since:
                        found.append(at)
                return False  # every entry is only read

            index.page(("queue", queue), None, 1, collect,
                       min(RATE_SEED_SCAN, max(1_000, 4 * starts)))
            if found:
                self.rates.seed(queue, [at - self._clock_offset for at in found])

    def remove_job(self, job_id: bytes) -> None:
        """Drop one finished job wherever it is held (an entry, columns, packed); the timer
        entries it left are stale for good, whatever job comes under its id."""
        self._timers.retire((job_id,))
        entry = self.jobs.get(job_id)
        if entry is not None:
            self._drop(job_id, entry)
        elif job_id in self.finished.packed:
            self._drop_packed([job_id])
        else:
            self._drop_held(job_id)

    def _drop(self, job_id: bytes, entry: JobEntry) -> None:
        """A finished job leaves the engine: its id, definition, result and state-budget
        charge are released, and its index entries are stale."""
        index = self._job_index  # None: deferred by replay, built later without it
        del self.jobs[job_id]
        self._released(index, peek(entry).state, entry.queue_row, entry.index_keys,
                       entry.charge, entry.margin)

    def _drop_held(self, job_id: bytes) -> bool:
        """``_drop`` of a job held in columns or packed (finished and persistent), read in
        place, not taken out first; False when it is not held."""
        finished = self.finished
        found = finished.where(job_id)
        if found is None:
            return False
        held, k = found
        index = self._job_index  # None: deferred by replay, built later without it
        texts = finished.texts
        queue = held.text(k, bj.QUEUE, texts)
        finished.remove(job_id)
        self.schedule_links.pop(job_id, None)
        self._released(index, held.state(k), self.queue_counts[queue],
                       index_keys_for(queue, held.text(k, bj.WORKER, texts)),
                       *charges(held, k))
        return True

    def _drop_packed(self, job_ids: list[bytes]) -> int:
        """``_drop_held`` of packed jobs, many at once (a compaction's switch expires
        thousands while writes wait): their counts, index entries and charges are given
        back per (state, queue, task), not job by job. Returns how many were dropped."""
        if not job_ids:
            return 0
        index = self._job_index  # None: deferred by replay, built later without it
        finished = self.finished
        packed_jobs, stamps = finished.packed, finished.stamps
        groups: Counter = Counter()
        charge = admitted = dropped = 0
        for job_id in job_ids:
            packed = packed_jobs.pop(job_id, None)
            if packed is None:  # named twice
                continue
            dropped += 1
            del stamps[job_id]
            groups[packed[packing.STATE], packed[packing.QUEUE], packed[packing.TASK]] += 1
            charge += packed[packing.CHARGE]
            admitted += packed[packing.CHARGE] - packed[packing.MARGIN]
        queue_counts = self.queue_counts
        for (state, queue, task), count in groups.items():
            queue_counts[queue][STATE_INDEX[state]] -= count
            if index is not None:
                index.forget(state, index_keys_for(queue, task), count)
        self.budget.release(charge, admitted)
        return dropped

    def _released(self, index: JobIndex | None, state: str, queue_row: list[int],
                  index_keys: Any, charge: int, margin: int) -> None:
        """What a job that left gives back: its count, its index entries, its charge."""
        queue_row[STATE_INDEX[state]] -= 1
        if index is not None:
            index.forget(state, index_keys)
        self.budget.release(charge, charge - margin)

    # ---- packing finished jobs (tay.engine.retained.packed) ----------------------------------

    def start_packing(self) -> None:
        """From now on a job that finishes is packed by a later ``pack_finished`` round (a
        running server). The jobs retained now are looked at by the first round: those a
        restart replayed record by record are entries too (the rest it holds in columns)."""
        if self.finishing is None:
            self.finishing = deque(self.jobs)

    def pack_finished(self, limit: int) -> bool:
        """Pack up to ``limit`` of the jobs that had finished when the last round ended,
        oldest first (the job passed over when it is gone, changed since, or not
        ``packable``); True when this round has more left (call again soon), False when it
        is over (the next round, after the caller's interval, takes the jobs that finished
        until now). So a job stays as it is for at least one interval: a result read right
        after the finish does not unpack it."""
        finishing = self.finishing
        if finishing is None:
            return False
        take = min(limit, self._pack_round)
        jobs = self.jobs
        finished = self.finished
        pack, packable = packing.pack, packing.packable
        pop = finishing.popleft
        for _ in range(take):
            job_id = pop()
            entry = jobs.get(job_id)
            if entry is not None and packable(entry):
                finished.add_packed(job_id, entry.stamp, pack(entry))
                dict.__delitem__(jobs, job_id)
        self._pack_round -= take
        if self._pack_round:
            return True
        self._pack_round = len(finishing)
        return False

    # ---- parking waiting jobs (tay.engine.retained.jobs.ParkedJobEntry) --------------------

    def start_parking(self) -> None:
        """From now on a job that begins to wait is parked by a later ``park_waiting``
        round if it still waits then (a running server). The jobs retained now are looked
        at by the first round."""
        if self.parking is None:
            self.parking = deque(self.jobs)

    def park_waiting(self, limit: int) -> bool:
        """Park up to ``limit`` of the jobs that had begun to wait when the last round
        ended, oldest first (the job passed over when it is gone, no longer waits, or is not
        ``parkable``); True when this round has more left (call again soon), False when it
        is over. So a job waits at least one interval as it is: one dispatched soon after
        its enqueue is never parked."""
        parking = self.parking
        if parking is None:
            return False
        take = min(limit, self._park_round)
        jobs = self.jobs
        park, parkable = packing.park, packing.parkable
        pop = parking.popleft
        for _ in range(take):
            entry = jobs.get(pop())
            if entry is not None and parkable(entry):
                park(entry)
        self._park_round -= take
        if self._park_round:
            return True
        self._park_round = len(parking)
        return False

    def _may_dispatch(self, job_id: bytes) -> bool:
        entry = self.jobs.get(job_id)
        return entry is not None and peek(entry).state in ("available", "scheduled",
                                                           "retryable")

    def _stamp_of(self, job_id: bytes) -> int | None:
        entry = self.jobs.get(job_id)
        return entry.stamp if entry is not None else self._finished_ids.get(job_id)

    # ---- lazy index validity -------------------------------------------------------

    def _ready_live(self, entry: tuple[int, int, bytes]) -> bool:
        job = self.jobs.get(entry[2])
        return job is not None and job.ready_key == entry

    def _timer_live(self, item: tuple) -> bool:
        job_id, revision = item[2]
        entry = self.jobs.get(job_id)
        if entry is None:
            return False
        job = peek(entry)  # a held failed row stays a row (its revision and state read)
        if job.revision != revision or job.state not in WAITING_FOR_TIME:
            return False
        # a deleted or expired job's entry has the key of a new job under its id (a Store-v2
        # insert is revision 1 again): pushed before the id was retired, it is stale
        retired = self._timers.retired
        return not retired or item[1] > retired.get(job_id, 0)

    def _timeout_live(self, item: tuple) -> bool:
        return item[2] in self.executors.reservations

    # ---- the one mutation path -----------------------------------------------------

    def _commit(self, entry: JobEntry | None, event: ev.Event, volatile: bool, out: Outcome,
                nodes: int | None = None) -> JobEntry | None:
        """Apply a live event: take its sequence, apply, re-index, and queue it if durable.

        A persistent insert or start may be refused by the history caps (``RequestRefused``
        capacity); ``apply`` is pure, so nothing has changed when that happens.
        """
        if not volatile and self.epoch is not None:  # Store v2: the logical domain
            state = self._commit_in_epoch(entry, event, out, nodes)
            if entry is None:
                entry = self.jobs[state.id]
        else:
            at = event.payload["at"]
            sequence = self._volatile_sequence if volatile else self.next_sequence
            state = apply(entry.state if entry is not None else None, sequence, event)
            if volatile:
                self._volatile_sequence += 1
            else:
                event = self._charge_history(event)
                self.next_sequence += 1
                out.events.append((sequence, event))
            entry = self._install_or_drop(entry, state, event, volatile, nodes, at)
        counted = _COUNTED.get(event.type, _NOT_COUNTED)
        if counted is not _NOT_COUNTED:
            at = event.payload["at"]
            outcome = counted or finish_outcome(state)
            self.activity.count(outcome, entry.queue, entry.task, at)
            # the run time of an execution that finished (an interrupted one's would count
            # the engine's downtime, a cancelled one never finished)
            if event.type == _FINISHED and outcome != "interrupted":
                self.activity.ran(entry.queue, entry.task, at - state.attempted_at)
        return entry

    def _charge_history(self, event: ev.Event) -> ev.Event:
        """Account (the end of an execution) or admit (anything else) the event's frame.

        Returns the event carrying its encoded payload, so the journal does not encode it
        a second time.
        """
        if self.history is None:
            return event
        raw = ev.encode_event(event)
        self._charge_frame(event, len(raw))
        return ev.Event(event.type, event.schema, event.name, event.payload, raw)

    def _charge_frame(self, event: ev.Event, payload_length: int) -> None:
        """The history-caps side of ``event`` written as a frame of ``payload_length``."""
        history = self.history
        if history is None:
            return
        pair = (event.type, event.schema)
        if history.uncapped or pair in FINISHING or (
                pair == ev.JOB_CANCELLED and event.payload["execution_token"] is not None):
            history.account_payload(payload_length)  # nothing to refuse (the common case)
        else:
            starting = 1 if pair == ev.JOB_STARTED else 0
            history.admit((frame_size(payload_length),), self.durable_executing + starting)

    def _history_check(self, events: list[ev.Event]) -> None:
        """Refuse (capacity) unless all of ``events`` fit the history caps together; accounts
        nothing, so a caller can commit them one by one knowing none will be refused."""
        if self.history is not None and events:
            sizes = [frame_size(len(ev.encode_event(event))) for event in events]
            self.history.check(sizes, self.durable_executing)

    def _install_or_drop(self, entry: JobEntry | None, state: JobState, event: ev.Event,
                         volatile: bool, nodes: int | None, at: int) -> JobEntry | None:
        """``_install`` of an applied event's state, or, for a (29,2) deletion (its state is
        the job's last), the job dropped: None. Live commits and both replays come here."""
        if event.type == _DELETED_TYPE and deletes(event):
            self.remove_job(state.id)
            return None
        return self._install(entry, state, volatile, nodes, at)

    def _install(self, entry: JobEntry | None, state: JobState, volatile: bool,
                 nodes: int | None = None, at: int = 0) -> JobEntry:
        """Store a job's new durable state and bring every index and charge in line.

        ``nodes``: the definition's node count when the caller measured it already (a live
        insert), so the args are not walked a second time. ``at``: the event's time (the
        attempt timeline).
        """
        if entry is None:
            if nodes is None:
                nodes = definition_nodes(state.definition)
            charge = job_charge(len(state.definition_bytes), nodes)
            entry = JobEntry(state, volatile, charge)
            self.jobs[state.id] = entry
            self.budget.charge(charge, admitted=True)
            if self.schedule_links:  # delivered before its insert (only a replay can say)
                entry.schedule_id = self.schedule_links.pop(state.id, None)
            previous = None
            old = None
        else:
            old = entry.state
            previous = old.state
            entry.state = state
            if previous == "executing":
                if not volatile:
                    self.durable_executing -= 1
                if state.state != "executing":
                    _finish_attempt(entry, state, at)
        if state.result_present or state.failure is not None \
                or (old is not None and old.result_present):
            self._charge_attachments(entry, old, state)
        name = state.state
        if previous != name:  # a result or failure record keeps the job in place
            row = entry.queue_row
            if previous is None:
                row = entry.queue_row = self.queue_counts.get(entry.queue) \
                    or self.queue_counts.setdefault(entry.queue, [0] * len(STATES))
            else:
                row[STATE_INDEX[previous]] -= 1
            row[STATE_INDEX[name]] += 1
            self._stamp = stamp = self._stamp + 1
            entry.stamp = stamp
            if self._job_index is not None:  # else built from the stamps on first use
                self._job_index.touch(stamp, state.id, name, entry.index_keys, previous)
            if name in TERMINAL_STATES:
                if volatile:
                    self.volatile_finished.append(state.id)
                elif self.finishing is not None:
                    self.finishing.append(state.id)
        if name == "available":
            self._ready_counter = counter = self._ready_counter + 1
            # the heap entry itself: the job is live in the heap while it holds this key
            key = entry.ready_key = (state.eligible_at, counter, state.id)
            self._ready.push(entry.queue, entry.task, key)
            if self.parking is not None:  # parked by a later round if it still waits
                self.parking.append(state.id)
            return entry
        entry.ready_key = None
        if name == "executing":
            if previous != "executing":
                _start_attempt(entry, state)
            if not volatile:
                self.durable_executing += 1
        elif name in WAITING_FOR_TIME:
            self._timers.push(state.eligible_at, (state.id, state.revision))
            if self.parking is not None:  # parked by a later round if it still waits
                self.parking.append(state.id)
        return entry

    def _install_row(self, row: JobRow) -> None:
        """``_install`` of a new terminal job from a base, kept as its row."""
        self._install_rows((row,))

    def _install_rows(self, rows: Iterable[JobRow]) -> None:
        """``_install`` of new terminal jobs from a base, in order, each kept as its row: the
        same charges, counts and stamps, read from the rows' fields (no index or timer holds
        a terminal job), the budget added up once for the run."""
        table, queue_counts, index = self.jobs, self.queue_counts, self._job_index
        states = len(STATES)
        stamp = self._stamp
        charged = margins = 0
        for row in rows:
            charge = job_charge(row.definition_length, row.args_nodes + DEFINITION_FIXED_NODES)
            entry = LazyJobEntry(row, charge)
            table[row.id] = entry
            charged += charge
            # _charge_attachments: a result's canonical size, its failure's details (0 without)
            margin = row.result_bytes + row.failure_bytes
            if margin:
                entry.charge += margin
                entry.margin = margin
                margins += margin
            state = row.state
            queue_row = entry.queue_row = queue_counts.get(entry.queue) \
                or queue_counts.setdefault(entry.queue, [0] * states)
            queue_row[STATE_INDEX[state]] += 1
            stamp += 1
            entry.stamp = stamp
            if index is not None:
                index.touch(stamp, row.id, state, entry.index_keys, None)
        self._stamp = stamp
        self.budget.charge(charged, admitted=True)
        self.budget.charge(margins)

    def _install_columns(self, jobs: BaseJobs, stamps: Sequence[int] | None = None) -> None:
        """``_install_rows`` of a columnar run, kept in columns (tay.engine.retained.finished): the
        same stamps, charges and counts, added up from the columns. ``stamps``: each job's
        (ascending, above every stamp so far; the caller positions ``self._stamp``), else
        the next ones in turn."""
        held = jobs.held(self.finished.texts)
        if stamps is None:
            first = self._stamp + 1
            ids = self.finished.add(held, first)
            self._stamp += len(ids)
            stamps = range(first, first + len(ids))
        else:
            ids = self.finished.add(held, stamps[0], stamps)
        self._hold_columns(held, ids, stamps)

    def _install_base_live(self, jobs: BaseJobs, rows: list[BaseLiveRow],
                           befores: Sequence[int]) -> None:
        """``_install_columns`` of a run with live jobs among its finished ones (``rows[m]``
        after ``befores[m]`` of ``jobs``): each job takes the next stamp in the run's
        order, the finished ones held in columns with theirs and each live one installed
        as its row (``_install_live``: its ready key or timer entry, in order)."""
        start, count = self._stamp, len(jobs)
        stamps = array("Q")
        live_stamps = []
        stamp, previous = start + 1, 0
        for before in befores:
            stamps.extend(range(stamp, stamp + before - previous))
            stamp += before - previous
            live_stamps.append(stamp)
            stamp, previous = stamp + 1, before
        stamps.extend(range(stamp, stamp + count - previous))
        if count:
            self._install_columns(jobs, stamps)
        for row, stamp in zip(rows, live_stamps):
            self._stamp = stamp - 1
            self._install_live(row)
        self._stamp = start + count + len(rows)

    def _install_tail(self, jobs: TailJobs, inserted: list[bytes]) -> tuple[int, int] | None:
        """The done jobs of a columnar tail run (tay.storage.v2.tail), kept in columns as a
        base run is, each with the stamp the record-by-record replay gives it (the state
        changes of the run's records up to its finish, after the current stamp). Returns
        the stamp and ready counter the run starts from (the caller positions them for
        each record it replays and after the run); None, installing nothing, when any of
        the run's inserted ids (``inserted``: those of the jobs not done) is held already.
        A run may have no done job (only jobs waiting at their insert, held as rows)."""
        ids = jobs.ids()
        table, held = self.jobs.keys(), self._finished_ids.keys()
        if not (table.isdisjoint(ids) and held.isdisjoint(ids)
                and table.isdisjoint(inserted) and held.isdisjoint(inserted)):
            return None
        start = self._stamp
        if not ids:  # a run of jobs waiting at their insert only (held as LiveRows)
            return start, self._ready_counter
        stamps = array("Q", jobs.stamps())
        for k in range(len(stamps)):
            stamps[k] += start
        self._install_columns(jobs, stamps)
        return start, self._ready_counter

    def _install_live(self, row: LiveRow | ExecutingRow | FailedRow | BaseLiveRow) -> None:
        """``_install`` of a new available job, kept as its row (a ``LazyJobEntry`` built on
        first read): the same charge, counts, stamp, ready key and heap push, read from the
        row's fields. A job left executing (``ExecutingRow``, built, in its insert's place)
        gets what its insert and start give it: the start's stamp, no ready key, its
        attempt's start in the timeline, a durable execution (which ``finish_recovery``
        settles). A job left retryable or discarded by a worker failure (``FailedRow``, kept
        as its row, or a timeout) gets what its records give it (``_install_failed``), as
        does one
        whose retry then succeeded (``RetriedRow``, its eight records), and one left
        scheduled at its delayed insert (``ScheduledRow``) what that insert gives it:
        counted scheduled, its timer entry instead of a ready key. A live base job
        (``BaseLiveRow``) gets what its snapshot gives it: available as a ``LiveRow``,
        scheduled or retryable its timer entry at its revision, and the margin of its
        failure's details when they are attached."""
        charge = job_charge(row.definition_length, row.args_nodes + DEFINITION_FIXED_NODES)
        kind = type(row)
        if kind is ExecutingRow:
            self._install_executing(row, charge)
            return
        if kind is FailedRow or kind is RetriedRow:
            self._install_failed(row, charge)
            return
        # a job waiting at its insert (or snapshot): available (a ready key and push) or
        # waiting for its time (its timer entry)
        entry = LazyJobEntry(row, charge)
        job_id = row.id
        self.jobs[job_id] = entry
        self.budget.charge(charge, admitted=True)
        if self.schedule_links:
            entry.schedule_id = self.schedule_links.pop(job_id, None)
        extra = row.failure_bytes  # a live base job's failure details (_charge_attachments)
        if extra:
            entry.charge += extra
            entry.margin = extra
            self.budget.charge(extra)
        queue = entry.queue
        queue_row = entry.queue_row = self.queue_counts.get(queue) \
            or self.queue_counts.setdefault(queue, [0] * len(STATES))
        name = row.state
        queue_row[STATE_INDEX[name]] += 1
        self._stamp = stamp = self._stamp + 1
        entry.stamp = stamp
        if self._job_index is not None:
            self._job_index.touch(stamp, job_id, name, entry.index_keys, None)
        if name != "available":  # scheduled, or retryable (a base row)
            self._timers.push(row.eligible_at, (job_id, row.revision))
            return
        self._ready_counter = counter = self._ready_counter + 1
        key = entry.ready_key = (row.eligible_at, counter, job_id)
        self._ready.push(queue, entry.task, key)

    def _install_executing(self, row: ExecutingRow, charge: int) -> None:
        # written out as _install_live's available branch is (a helper call per job costs
        # ~600 instructions on a path taken once per recovered job)
        job = row.job
        entry = JobEntry(job, False, charge)
        self.jobs[job.id] = entry
        self.budget.charge(charge, admitted=True)
        if self.schedule_links:
            entry.schedule_id = self.schedule_links.pop(job.id, None)
        queue = entry.queue
        queue_row = entry.queue_row = self.queue_counts.get(queue) \
            or self.queue_counts.setdefault(queue, [0] * len(STATES))
        queue_row[_EXECUTING] += 1
        entry.stamp = row.stamp  # the replayed records position self._stamp
        if self._job_index is not None:
            self._job_index.touch(row.stamp, job.id, "executing", entry.index_keys, None)
        entry.attempts = ((job.attempt, job.attempted_at, None, None),)
        self.durable_executing += 1

    def _install_failed(self, row: FailedRow, charge: int) -> None:
        """A job a worker failure left retryable or discarded, or whose retry then succeeded
        (``RetriedRow``), kept as its row: the definition's charge and the margin of the
        failure's details (and the nil result's) (``_charge_attachments``),
        counted in its state, the finish's stamp (the replayed records position
        ``self._stamp``), the failed attempt in the timeline, no ready key, and the timer
        entries replay pushes (a retryable job's)."""
        entry = LazyJobEntry(row, charge)
        self.jobs[row.id] = entry
        self.budget.charge(charge, admitted=True)
        if self.schedule_links:  # installed in its last record's place: after its delivery
            entry.schedule_id = self.schedule_links.pop(row.id, None)
        extra = row.failure_bytes
        entry.charge += extra
        entry.margin = extra
        self.budget.charge(extra)
        queue = entry.queue
        queue_row = entry.queue_row = self.queue_counts.get(queue) \
            or self.queue_counts.setdefault(queue, [0] * len(STATES))
        queue_row[STATE_INDEX[row.state]] += 1
        entry.stamp = row.stamp
        if self._job_index is not None:
            self._job_index.touch(row.stamp, row.id, row.state, entry.index_keys, None)
        entry.attempts = row.attempts
        for due, key in row.timers:
            self._timers.push(due, key)

    def _hold_columns(self, held: BaseJobs, ids: list[bytes], stamps: Sequence[int]) -> None:
        """The charges, counts and index entries of a run just held in columns."""
        texts = self.finished.texts
        columns = held.columns
        count = len(ids)
        charged = jobs_charge(sum(columns[bj.DEFINITION_LENGTH::bj.BASE_JOB]),
                              sum(columns[bj.ARGS_NODES::bj.BASE_JOB])
                              + DEFINITION_FIXED_NODES * count, count)
        # a job's margin is its result's size and its failure's details' charge (the walks
        # write 0 for an attachment a job does not have)
        margins = sum(columns[bj.RESULT_BYTES::bj.BASE_JOB]) \
            + sum(columns[bj.FAILURE_BYTES::bj.BASE_JOB])
        self.budget.charge(charged, admitted=True)
        self.budget.charge(margins)
        states = columns[bj.STATE::bj.BASE_JOB]
        queue_counts = self.queue_counts
        width = len(STATES)
        for (queue, state), count in Counter(zip(held.keys(bj.QUEUE, texts), states)).items():
            row = queue_counts.get(queue) or queue_counts.setdefault(queue, [0] * width)
            row[state] += count
        index = self._job_index
        if index is not None:  # kept up to date (not deferred): each job's entries
            for k, job_id in enumerate(ids):
                index.touch(stamps[k], job_id, held.state(k), index_keys_for(
                    held.text(k, bj.QUEUE, texts), held.text(k, bj.WORKER, texts)), None)

    def _charge_attachments(self, entry: JobEntry, old: JobState | None,
                            state: JobState) -> None:
        """A new result or failure's details is charged against the budget's margin."""
        extra = 0
        if state.result_present and (old is None or not old.result_present):
            result = state.result
            extra += 1 if result is None else measure(result, "result").encoded_bytes  # nil: 1
        elif old is not None and old.result_present and not state.result_present:
            # an interrupted execution's result, dropped by its finish (transitions)
            result = old.result
            dropped = 1 if result is None else measure(result, "result").encoded_bytes
            entry.charge -= dropped
            entry.margin -= dropped
            self.budget.release(dropped, 0)
        if state.failure is not None and (old is None or state.failure is not old.failure):
            extra += failure_bytes(state.failure)
        if extra:
            entry.charge += extra
            entry.margin += extra
            self.budget.charge(extra)

    # ---- finishing and releasing executions ------------------------------------------

    def _retry_due(self, attempt: int, at: int) -> int:
        """Draw the retry due time once (it is stored in the event, never re-drawn)."""
        low, high = retry_due_range(attempt, at)
        return low if high <= low else low + self.rng.randint(0, high - low)

    def _finish(self, entry: JobEntry, outcome: int, diagnostic: int | None, now_ms: int,
                out: Outcome) -> None:
        job = entry.state
        disposition, next_attempt = expected_finish(outcome, job.attempt,
                                                    job.definition["max_attempts"])
        due = self._retry_due(job.attempt, now_ms) if disposition == ev.RETRYABLE else None
        event = ev.job_finished(
            job.id, now_ms, job.revision, execution_token=job.execution, outcome=outcome,
            diagnostic_code=diagnostic, disposition=disposition, next_attempt=next_attempt,
            next_due_at=due,
        )
        self._commit(entry, event, entry.volatile, out)

    def _release(self, reservation: Reservation) -> None:
        self.executors.release(reservation)
        self.executions_ended(reservation.queue)
        entry = self.jobs.get(reservation.job_id)
        if entry is not None and entry.reservation_id == reservation.reservation_id:
            entry.reservation_id = None

    def executions_ended(self, queue: str) -> None:
        """One execution of ``queue`` less; a queue running none leaves ``_executing``, so
        queue names used once do not stay in it (nor in its metric) for the engine's life."""
        left = self._executing[queue] - 1
        if left:
            self._executing[queue] = left
        else:
            del self._executing[queue]

    # ---- dispatch ----------------------------------------------------------------------

    def stop_dispatching(self) -> None:
        """Start nothing new from now on (shutdown drain); reports still settle executions."""
        self.dispatching = False

    def _dispatch(self, now_ms: int, mono_ms: int, out: Outcome) -> None:
        """Start as many ready jobs as credits and executors allow, round-robin over queues."""
        rates = self.rates if self.rates.limits else None  # most engines limit no queue
        if rates is not None:
            rates.wake = None  # this dispatch says which limited queue waits, until when
        if not self.dispatching:
            return
        ready, executing, paused = self._ready, self._executing, self.paused
        credits, default_credits = self.credit_limits.get, self.config.default_queue_concurrency
        jobs, select = self.jobs, self.executors.select
        # Each pass offers every candidate queue one start, in rotation order. A queue that
        # cannot start now (credits used, paused, nothing it can hand to an executor) cannot
        # later in this call either: a start only uses up credits and executor room and
        # makes no job ready. So the next pass offers only the queues that just started,
        # which the rotation now holds last, in the order they were served.
        rotation = ready.rotation
        candidates = list(rotation)  # ``ready.queues()``, without its call
        while candidates:
            served = []
            for queue in candidates:
                if executing.get(queue, 0) >= credits(queue, default_credits) \
                        or queue in paused:
                    continue
                if rates is not None and queue in rates and not rates.allows(queue, mono_ms):
                    continue  # its rate limit: ``rates.wake`` says when to look again
                # one start from the queue (was ``_dispatch_one``, inline: one call less
                # per start): the earliest head an executor can take, started
                best = ready.take(queue, select)
                if best is None:
                    continue
                task, head, executor = best
                try:
                    self._start(jobs[head[2]], executor, now_ms, mono_ms, out)
                except RequestRefused as refusal:
                    # refused before any change: the job stays available with no attempt
                    # used; history caps: no START fits now, later dispatches try again
                    ready.push(queue, task, head)
                    self.activity.start_refusals[refusal.details.get("reason", refusal.code)] += 1
                    return
                if rates is not None and queue in rates:
                    rates.started(queue, mono_ms)
                if queue in rotation:  # ``ready.served(queue)``, inline
                    rotation.move_to_end(queue)
                if executing[queue] < credits(queue, default_credits):
                    served.append(queue)  # else the next pass would skip it anyway
            candidates = served

    def _start(self, entry: JobEntry, executor: Executor, now_ms: int, mono_ms: int,
               out: Outcome) -> None:
        job = entry.state
        eligible_at = job.eligible_at
        at = now_ms if now_ms > eligible_at else eligible_at
        if entry.volatile or self.epoch is None or not self.fused \
                or not self._start_fused(entry, job, at, out):  # tay.engine.epoch
            event = ev.job_started(job.id, at, job.revision, job.next_attempt, job.cycle)
            entry = self._commit(entry, event, entry.volatile, out)
        definition = job.definition
        timeout_ms = definition.scalars[TIMEOUT_MS] if type(definition) is LazyDefinition \
            else definition["timeout_ms"]
        rng = self.rng
        if type(rng) is BufferedSystemRandom:  # random_token's own branch, without its call
            reservation_id = rng.token()
            execution_id = rng.token()
        else:
            reservation_id = random_token(rng)
            execution_id = random_token(rng)
        queue = entry.queue
        deadline = mono_ms + timeout_ms
        reservation = Reservation(reservation_id, execution_id, executor.conn, job.id, queue,
                                  deadline)
        # reserved in the executor and the registry (written here: one call less per job)
        executor.reservations[reservation_id] = reservation
        self.executors.reservations[reservation_id] = reservation
        entry.reservation_id = reservation_id
        self._executing[queue] += 1
        self._timeouts.push(deadline, reservation_id)
        out.effects.append(_new_tuple(Execute, (
            executor.conn, reservation_id, execution_id, job.id.hex(), entry.task,
            self.execute_args.take(job.id, definition) or args_json(definition), timeout_ms,
            queue)))


# ---- operations bookkeeping (docs/admin.md) --------------------------------------------

def failure_bytes(failure: Mapping[str, str]) -> int:
    """State-budget charge of a kept failure object (its text, UTF-8)."""
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in failure.values()) + 64


def finish_outcome(state: JobState) -> str:
    """The timeline / metrics label of a finish that led to ``state``."""
    if state.state == "completed":
        return "completed"
    if state.state == "cancelled":
        return "cancelled"
    code = state.diagnostic["code"] if state.diagnostic is not None else None
    if state.state == "retryable" and code == ev.DIAG_INTERRUPTED:
        return "interrupted"
    if state.state == "discarded":
        return "discarded"
    return "timed_out" if code == ev.DIAG_TIMEOUT else "failed"


# The timeline is a tuple, replaced on each change: most jobs have one attempt, and a
# 1-tuple is 40 bytes less than a list (which also over-allocates) per retained job.

def _start_attempt(entry: JobEntry, state: JobState) -> None:
    started = (state.attempt, state.attempted_at, None, None)
    attempts = entry.attempts
    if attempts is None:
        entry.attempts = (started,)
    else:
        entry.attempts = attempts[1 - MAX_TIMELINE:] + (started,)


def _finish_attempt(entry: JobEntry, state: JobState, at: int) -> None:
    attempts = entry.attempts
    if attempts and attempts[-1][2] is None:
        attempt, started, _, _ = attempts[-1]
        entry.attempts = attempts[:-1] + ((attempt, started, at, finish_outcome(state)),)


# record type -> how a live event of it counts (types are unique across the registry)
_NOT_COUNTED = object()
_FINISHED = ev.JOB_FINISHED[0]
_DELETED_TYPE = ev.JOB_DELETED[0]  # a type compare before ``deletes`` (the commit path)
_COUNTED = {ev.JOB_INSERTED[0]: "enqueued", ev.JOB_FINISHED[0]: None,
            ev.JOB_CANCELLED[0]: None, ev.JOB_RETRIED[0]: "retried",
            ev.JOB_REQUEUED[0]: "retried"}

