"""Prometheus metrics, ``/healthz`` and ``/readyz`` (docs/operations.md "What to monitor").

Nothing here runs per job except two histogram observations: the enqueue-ack latency (in
the driver, when an ``enqueued`` reply is released) and the commit figures (in the journal
writer thread, once per batch). Everything else is read from the engine, the committer and
the disk when Prometheus scrapes, by a collector on the event-loop thread, and rendered
with ``prometheus_client``'s text format. Every name starts with ``tay_``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

# seconds; fsync and ack latencies of a local disk span ~50 us .. seconds
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# seconds; an online compaction takes ~ms (empty store) .. minutes (millions of jobs)
COMPACTION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
READY_MIN_FREE_BYTES = 64 * 1024 * 1024  # /readyz fails below this much free disk


class Histogram:
    """Fixed buckets, one writer at a time (a thread or the loop); read without a lock."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf``."""
        out, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts):
            running += count
            out.append((bound, running))
        return out


class ServerMetrics:
    """The histograms the server feeds; the rest is read at scrape time."""

    def __init__(self) -> None:
        self.enqueue_ack = Histogram(LATENCY_BUCKETS)
        self.fsync = Histogram(LATENCY_BUCKETS)
        self.commit_write = Histogram(LATENCY_BUCKETS)
        self.batch_events = Histogram(BATCH_BUCKETS)
        self.compactions: dict[str, int] = {}  # online compactions by outcome
        self.compaction = Histogram(COMPACTION_BUCKETS)  # published: capture to reclaim
        self.compaction_pause = Histogram(LATENCY_BUCKETS)  # published: writes paused
        self.compaction_cpu_s = 0.0  # the reaped compaction (and check) processes' CPU
        self.full_collections = Histogram(LATENCY_BUCKETS)  # the cycle collector's pauses
        self.loop_lag = Histogram(LATENCY_BUCKETS)  # each loop beat's lateness (LoopWatch)
        self.loop_watch: Any = None  # the LoopWatch: its stall counts, read at scrape time
        self._collection_started = 0.0

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` hook: times each full collection (the oldest generation, the
        one that walks every long-lived object; its pause stops the loop). Collections do
        not overlap, so this has one writer at a time whatever thread collects."""
        if info["generation"] != 2:
            return
        if phase == "start":
            self._collection_started = time.perf_counter()
        else:
            self.full_collections.observe(time.perf_counter() - self._collection_started)

    def watch_collections(self) -> None:
        import gc

        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def unwatch_collections(self) -> None:
        import gc

        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def observe_compaction(self, outcome: str, seconds: float | None,
                           pause_s: float | None) -> None:
        """Loop thread, once per online compaction attempt."""
        self.compactions[outcome] = self.compactions.get(outcome, 0) + 1
        if outcome == "published":
            if seconds is not None:
                self.compaction.observe(seconds)
            if pause_s is not None:
                self.compaction_pause.observe(pause_s)

    def observe_compaction_cpu(self, seconds: float) -> None:
        """Loop thread, once a compaction's processes are reaped (whatever its outcome)."""
        self.compaction_cpu_s += seconds

    def observe_commit(self, events: int, write_s: float, sync_s: float) -> None:
        """Writer thread, once per durable batch."""
        self.batch_events.observe(events)
        self.commit_write.observe(write_s)
        self.fsync.observe(sync_s)

    def attach_commit(self, committer: Any) -> None:
        """Feed the commit histograms: the Python writer calls ``observe_commit`` per batch;
        the C writer counts into the same buckets in C, read at each scrape (``refresh``)."""
        self._committer = committer
        if getattr(committer, "implementation", "python") == "c":
            committer.observe(LATENCY_BUCKETS, BATCH_BUCKETS)
        else:
            committer.observer = self.observe_commit

    def detach_commit(self) -> None:
        committer, self._committer = getattr(self, "_committer", None), None
        if committer is not None and getattr(committer, "implementation", "python") != "c":
            committer.observer = None

    def refresh(self) -> None:
        """Scrape time: copy the C writer's histograms (nothing to do for the Python one)."""
        committer = getattr(self, "_committer", None)
        if committer is None or getattr(committer, "implementation", "python") != "c":
            return
        observed = committer.observations()
        if observed is None:
            return
        for histogram, key in ((self.batch_events, "events"), (self.commit_write, "write"),
                               (self.fsync, "sync")):
            counts, total = observed[key]
            histogram.counts = list(counts)
            histogram.total = total
            histogram.count = observed["batches"]


def render(collect: Callable[[], Iterator[Any]]) -> bytes:
    """The Prometheus text exposition of one collector function."""
    from prometheus_client import CollectorRegistry, generate_latest

    class _Collector:
        def collect(self) -> Iterator[Any]:
            return collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return generate_latest(registry)


def collector(engine: Any, driver: Any, store: Any, metrics: ServerMetrics,
              facts: Callable[[], dict[str, Any]], started: float,
              compactor: Callable[[], Any]) -> Callable[[], Iterator[Any]]:
    """A function yielding every metric family from the live objects (loop thread);
    ``compactor()`` gives the running online compaction's process figures, or None."""
    from prometheus_client.core import (
        CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily,
    )
    from tay._version import __version__
    from tay.engine.activity import RUN_BOUNDS_MS
    from tay.storage.events.transitions import STATES

    def histogram(name: str, doc: str, source: Histogram) -> HistogramMetricFamily:
        return HistogramMetricFamily(name, doc, buckets=source.buckets(), sum_value=source.total)

    def collect() -> Iterator[Any]:
        metrics.refresh()
        yield InfoMetricFamily("tay_build", "tay version", value={"version": __version__})
        yield GaugeMetricFamily("tay_uptime_seconds", "seconds since this process started",
                                value=time.monotonic() - started)
        yield GaugeMetricFamily("tay_writer_running", "1 while the journal writer runs",
                                value=1 if driver.stopped is None else 0)
        jobs = CounterMetricFamily("tay_jobs", "job events since start by outcome, queue "
                                   "and task", labels=("outcome", "queue", "task"))
        for (outcome, queue, task), count in sorted(engine.activity.jobs.items()):
            jobs.add_metric((outcome, queue, task), count)
        yield jobs
        runs = HistogramMetricFamily("tay_job_run_seconds", "run time of each finished "
                                     "execution (start to finish, as the engine recorded "
                                     "them) since start, by queue and task",
                                     labels=("queue", "task"))
        bounds = [f"{bound / 1000:g}" for bound in RUN_BOUNDS_MS] + ["+Inf"]
        for queue, task, _, counts, total_ms in sorted(engine.activity.runs()):
            if any(counts):
                runs.add_metric((queue, task), list(zip(bounds, accumulate(counts))),
                                total_ms / 1000)
        yield runs
        capped = CounterMetricFamily("tay_job_starts_refused", "dispatch attempts a history "
                                     "cap refused (the job stays available)", labels=("cap",))
        for cap, count in sorted(engine.activity.start_refusals.items()):
            capped.add_metric((cap,), count)
        yield capped
        depth = GaugeMetricFamily("tay_queue_jobs", "retained jobs per queue and state",
                                  labels=("queue", "state"))
        for queue, row in sorted(engine.queue_counts.items()):
            for state, count in zip(STATES, row):
                if count:
                    depth.add_metric((queue, state), count)
        yield depth
        latency = GaugeMetricFamily("tay_queue_latency_seconds", "how long the oldest ready "
                                    "job of each queue has waited for a dispatch (0: none "
                                    "waits)", labels=("queue",))
        now_ms = driver.wall_ms()  # the engine's clock
        for queue in sorted(engine.queue_counts):
            latency.add_metric((queue,), engine.queue_latency_ms(queue, now_ms) / 1000)
        yield latency
        states = GaugeMetricFamily("tay_jobs_by_state", "retained jobs per state",
                                   labels=("state",))
        for state in STATES:
            states.add_metric((state,), engine.counts[state])
        yield states
        executing = GaugeMetricFamily("tay_queue_executing", "executions running per queue",
                                      labels=("queue",))
        running = engine._executing  # a queue running nothing has no entry: 0
        for queue in sorted(set(engine.queue_counts) | set(running)):
            executing.add_metric((queue,), running.get(queue, 0))
        yield executing
        paused = GaugeMetricFamily("tay_queue_paused", "1 for a paused queue", labels=("queue",))
        for queue in sorted(engine.paused):
            paused.add_metric((queue,), 1)
        # credits of every queue that has jobs, is configured or was scaled (what dispatch
        # reads: scale_queue's over the configured ones)
        credits = GaugeMetricFamily("tay_queue_credits", "executions a queue may run at once",
                                    labels=("queue",))
        for queue in sorted(set(engine.queue_counts) | set(engine.credit_limits)):
            credits.add_metric((queue,), engine.queue_credits(queue))
        yield paused
        yield credits
        # a rate-limited queue's limit, as starts per second (limit_queue)
        rates = GaugeMetricFamily("tay_queue_rate_limit_per_second", "job starts a "
                                  "rate-limited queue may make per second, on average",
                                  labels=("queue",))
        for queue, (starts, period_ms) in sorted(engine.rates.limits.items()):
            rates.add_metric((queue,), starts * 1000 / period_ms)
        yield rates
        schedules = GaugeMetricFamily("tay_schedules", "schedules by state (active, paused, "
                                      "cancelled)", labels=("state",))
        table = engine.schedules
        cancelled = sum(1 for state in table.states().values() if state.cancelled)
        paused_live = sum(1 for key in table.paused if not table.get(key).cancelled)
        schedules.add_metric(("active",), len(table) - cancelled - paused_live)
        schedules.add_metric(("paused",), paused_live)
        schedules.add_metric(("cancelled",), cancelled)
        yield schedules
        executors = list(engine.executors.executors.values())
        workers = GaugeMetricFamily("tay_executors", "connected executors by transport",
                                    labels=("transport",))
        capacity = GaugeMetricFamily("tay_executor_capacity", "declared capacity by transport",
                                     labels=("transport",))
        quiet = GaugeMetricFamily("tay_executors_quiet", "connected executors told to go "
                                  "quiet (offered no new job), by transport",
                                  labels=("transport",))
        for transport in ("socket", "http"):
            chosen = [e for e in executors if e.mode != "client"
                      and (e.queue is not None) == (transport == "http")]
            workers.add_metric((transport,), len(chosen))
            capacity.add_metric((transport,), sum(e.capacity for e in chosen))
            quiet.add_metric((transport,), sum(1 for e in chosen if e.quiet))
        yield workers
        yield capacity
        yield quiet
        yield GaugeMetricFamily("tay_admission_permits_in_use", "client permits in use",
                                value=engine.permits.in_use)
        yield GaugeMetricFamily("tay_state_bytes", "charged retained-state bytes",
                                value=engine.budget.used)
        yield GaugeMetricFamily("tay_jobs_held_compact", "retained finished jobs held packed "
                                "or in columns, out of the cycle collector's sight",
                                value=len(engine.finished))
        yield GaugeMetricFamily("tay_state_bytes_limit", "--max-state-bytes",
                                value=engine.budget.limit)
        if engine.history is not None:
            yield GaugeMetricFamily("tay_history_bytes", "journal bytes",
                                    value=engine.history.history_bytes)
            yield GaugeMetricFamily("tay_history_segments", "journal segment files",
                                    value=engine.history.segments)
        yield from _process_families(compactor())
        storage = facts()
        if storage["free_bytes"] is not None:
            yield GaugeMetricFamily("tay_disk_free_bytes", "free bytes of the store's filesystem",
                                    value=storage["free_bytes"])
        yield GaugeMetricFamily("tay_store_bytes", "bytes of every file in the data dir",
                                value=storage["store_bytes"])
        stats = store.committer.stats()
        yield CounterMetricFamily("tay_commit_batches", "durable journal batches",
                                  value=stats.batches)
        yield CounterMetricFamily("tay_commit_events", "durable journal events",
                                  value=stats.events)
        yield CounterMetricFamily("tay_fsyncs", "journal fsyncs", value=stats.fsyncs)
        yield CounterMetricFamily("tay_commit_gathered_batches",
                                  "batches that waited for their siblings under load "
                                  "(group commit gathering)", value=stats.gathered)
        yield histogram("tay_enqueue_ack_seconds", "enqueue request to durable reply",
                        metrics.enqueue_ack)
        yield histogram("tay_fsync_seconds", "journal fsync duration per batch", metrics.fsync)
        yield histogram("tay_commit_write_seconds", "journal write duration per batch",
                        metrics.commit_write)
        yield histogram("tay_commit_batch_events", "events per durable batch",
                        metrics.batch_events)
        compactions = CounterMetricFamily("tay_compactions", "online compactions by outcome "
                                          "(published, failed, superseded, verification_failed, "
                                          "verification_incomplete)", labels=("outcome",))
        for outcome in ("published", "failed", "superseded", "verification_failed",
                        "verification_incomplete"):
            compactions.add_metric((outcome,), metrics.compactions.get(outcome, 0))
        yield compactions
        yield CounterMetricFamily("tay_compaction_cpu_seconds", "CPU (user+system) of the "
                                  "online compactions' processes, counted as each is reaped",
                                  value=metrics.compaction_cpu_s)
        yield histogram("tay_compaction_seconds", "published online compaction, capture to "
                        "reclaim", metrics.compaction)
        yield histogram("tay_compaction_pause_seconds", "writes paused by an online "
                        "compaction's switch", metrics.compaction_pause)
        yield histogram("tay_gc_full_collection_seconds", "the cycle collector's full "
                        "collections (the event loop waits for each)", metrics.full_collections)
        yield histogram("tay_event_loop_lag_seconds", "how late the event loop ran a beat "
                        "due every 0.1 s", metrics.loop_lag)
        watch = metrics.loop_watch
        if watch is not None:
            yield CounterMetricFamily("tay_event_loop_stalls", "beats later than "
                                      "--loop-stall-ms (0: not counted)", value=watch.stalls)
            yield GaugeMetricFamily("tay_event_loop_longest_stall_seconds", "the longest stall "
                                    "since start", value=watch.longest_s)

    return collect


def _process_families(running: dict[str, Any] | None) -> Iterator[Any]:
    """The server process under the names Prometheus client libraries use (``process_``),
    the rest under ``tay_``; the compaction process's while one runs (``running``)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from .process_figures import server

    me = server()
    yield CounterMetricFamily("process_cpu_seconds", "user and system CPU of the server "
                              "process", value=me["cpu_user_s"] + me["cpu_system_s"])
    yield GaugeMetricFamily("process_resident_memory_bytes", "resident memory of the server",
                            value=me["rss_bytes"])
    yield GaugeMetricFamily("process_virtual_memory_bytes", "virtual memory of the server",
                            value=me["vms_bytes"])
    yield GaugeMetricFamily("process_open_fds", "open file descriptors", value=me["open_fds"])
    if me["max_fds"] is not None:
        yield GaugeMetricFamily("process_max_fds", "the open file descriptor limit",
                                value=me["max_fds"])
    yield GaugeMetricFamily("tay_process_peak_resident_memory_bytes", "the most memory the "
                            "server held resident since start", value=me["peak_rss_bytes"])
    yield GaugeMetricFamily("tay_process_threads", "threads of the server process",
                            value=me["threads"])
    yield GaugeMetricFamily("tay_compaction_process_running", "1 while an online "
                            "compaction's process runs", value=1 if running else 0)
    if running:
        yield GaugeMetricFamily("tay_compaction_process_resident_memory_bytes", "resident "
                                "memory of the running compaction process (counts pages it "
                                "shares with the server)", value=running["rss_bytes"])
        yield GaugeMetricFamily("tay_compaction_process_unique_memory_bytes", "memory only "
                                "the running compaction process holds (what it costs)",
                                value=running["unique_bytes"])
        yield GaugeMetricFamily("tay_compaction_process_cpu_seconds", "CPU the running "
                                "compaction process used so far",
                                value=running["cpu_user_s"] + running["cpu_system_s"])


def readiness(driver: Any, free_bytes: int | None) -> tuple[bool, list[str]]:
    """Ready: recovered (we are listening), writer running, disk not full."""
    problems = []
    if driver.stopped is not None:
        problems.append(f"journal writer stopped: {driver.stopped.message}")
    if free_bytes is not None and free_bytes < READY_MIN_FREE_BYTES:
        problems.append(f"free disk {free_bytes} bytes is below {READY_MIN_FREE_BYTES}")
    if getattr(driver, "draining", False):
        problems.append("draining for shutdown")
    return not problems, problems
