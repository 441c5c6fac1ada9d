"""One measured run of a profile in one commit mode.

Order: fresh store -> ``tay serve`` (own process) -> worker processes register -> producer
processes connect -> all callers start together -> wait for every execution -> stop
workers and server (reading peak RSS, CPU and commit counters) -> read the journal
offline -> cold restart (spawn to accepted connect, peak RSS) -> stop; then, unless turned
off, one more start whose clean stop compacts (``--compact-on-stop on``), the store read
again (the compaction must keep every job's state), and cold restarts of the compacted store.
"""

from __future__ import annotations

import base64
import os
import platform
import shutil
import tempfile
import time
from array import array
from dataclasses import dataclass, replace
from typing import Any

import psutil

from tay.failures import ConfigurationError

from .journal_facts import read_store_facts
from .metrics import latency_summary_ms, rate
from .profile import Profile
from .progress import ProgressBar
from .report import write_json
from .server import ServerProcess, ServerSettings, engine_cpu
from .syscalls import SyscallCounter
from .threads import by_role, per_job as threads_per_job, snapshot

MAX_SOCKET_PATH = 100
SETTLE_S = 0.3  # after the last execution, let its finish report reach the journal


@dataclass(frozen=True)
class CommitMode:
    label: str
    max_events: int
    interval_ms: int


def run_mode(profile: Profile, mode: CommitMode, root: str, *, durability: str,
             show_progress: bool = True, keep_data: bool = False, sdk: str = "ours",
             restarts: int = 3, compacted_restart: bool = True,
             syscalls: str = "on") -> dict[str, Any]:
    run_dir = _fresh_run_dir(root, f"{profile.name}-{mode.label}")
    socket_dir = None
    socket_path = os.path.join(run_dir, "tay.sock")
    if len(socket_path.encode()) > MAX_SOCKET_PATH:
        socket_dir = tempfile.mkdtemp(prefix="tay-bench-")
        socket_path = os.path.join(socket_dir, "tay.sock")
    settings = ServerSettings(
        data_dir=os.path.join(run_dir, "data"), socket_path=socket_path,
        queues=profile.queues, durability=durability,
        group_commit_max_events=mode.max_events, group_commit_interval_ms=mode.interval_ms,
        log_path=os.path.join(run_dir, "server.log"))
    try:
        result = _measure(profile, mode, settings, show_progress, sdk, restarts,
                          syscalls)
        if compacted_restart:
            result.update(_compacted_restarts(settings, restarts, result["job_states"]))
        write_json(result, os.path.join(run_dir, "result.json"))  # survives a later failure
        return result
    finally:
        if socket_dir:
            shutil.rmtree(socket_dir, ignore_errors=True)
        if not keep_data:
            shutil.rmtree(settings.data_dir, ignore_errors=True)


def _measure(profile: Profile, mode: CommitMode, settings: ServerSettings,
             show_progress: bool, sdk: str = "ours", restarts: int = 3,
             syscalls: str = "on") -> dict[str, Any]:
    server = ServerProcess(settings)
    empty_startup_s = server.start()
    try:
        load = _run_load(profile, settings.socket_path, server.pid, show_progress, mode.label,
                         sdk, syscalls)
    finally:
        reading = server.stop()
    facts = read_store_facts(settings.data_dir)
    restart_runs, restart_cpu, restart_peaks = _cold_restarts(settings, restarts)
    first_send_s = load["first_send_ns"] / 1e9
    last_finish_s = (facts["last_finished_at_ms"] or 0) / 1000.0
    completed = facts["job_states"].get("completed", 0)
    per_job = 1e6 / max(completed, 1)
    syscalls = load["load_syscalls"]
    fsyncs = (reading.commit_stats or {}).get("fsyncs")
    return {
        "profile": profile.name, "mode": mode.label, "durability": settings.durability,
        "sdk": sdk,
        "group_commit": {"max_events": mode.max_events, "interval_ms": mode.interval_ms},
        "jobs": profile.jobs, "completed": completed,
        "callers": profile.callers, "producer_processes": profile.producer_processes,
        "worker_processes": profile.worker_processes, "worker_capacity": profile.worker_capacity,
        "jobs_per_s": round(rate(completed, last_finish_s - first_send_s), 2),
        "elapsed_s": round(last_finish_s - first_send_s, 4),
        "harness_elapsed_s": round(load["harness_elapsed_s"], 4),
        # when the producers were done, beside elapsed_s: well before the last finish, the
        # workers' side bounded the run (a backlog built up); near it, the producers' side
        "inserts_done_s": round(load["last_ack_ns"] / 1e9 - first_send_s, 4),
        "backlog_at_inserts_done": profile.jobs - load["executed_at_inserts_done"],
        "insert_rtt_ms": latency_summary_ms(load["round_trips"]),
        "events": facts["job_lifecycle_events"], "expected_events": profile.expected_events,
        "events_by_name": facts["events_by_name"], "history_bytes": facts["history_bytes"],
        "segments": facts["segments"], "job_states": facts["job_states"],
        "fsyncs": fsyncs,
        "fsyncs_per_job": None if fsyncs is None else round(fsyncs / max(completed, 1), 3),
        "commit_stats": reading.commit_stats,
        "empty_startup_s": round(empty_startup_s, 4),
        "engine_max_rss_bytes": reading.peak_rss_bytes,
        "engine_cpu_user_s": round(reading.cpu_user_s, 3),
        "engine_cpu_system_s": round(reading.cpu_system_s, 3),
        # the server's CPU per completed job (user+sys, all threads): over its whole life,
        # and over the load only (go signal to the last execution: no start-up, no replay)
        "engine_cpu_us_per_job": round((reading.cpu_user_s + reading.cpu_system_s) * per_job, 1),
        "load_cpu_us_per_job": round(
            (load["load_cpu_user_s"] + load["load_cpu_system_s"]) * per_job, 1),
        "load_syscalls": syscalls,
        # by thread: the loop (main) thread, the C journal writer, the rest (tay.bench.threads)
        "load_threads": load["load_threads"],
        "threads_per_job": threads_per_job(load["load_threads"], completed),
        # the SDK's own CPU per job over the load: every worker process, every producer
        "worker_cpu_us_per_job": None if load["worker_cpu_s"] is None
        else round(load["worker_cpu_s"] * per_job, 1),
        "producer_cpu_us_per_job": None if load["producer_cpu_s"] is None
        else round(load["producer_cpu_s"] * per_job, 1),
        "syscalls_per_job": (None if "all" not in syscalls else
                             {name: round(count / max(completed, 1), 2)
                              for name, count in syscalls.items()}),
        "server_exit_code": reading.exit_code,
        "cold_restart_s": min(restart_runs), "cold_restart_runs_s": restart_runs,
        "cold_restart_cpu_s": min(restart_cpu), "cold_restart_cpu_runs_s": restart_cpu,
        "cold_restart_peak_rss_bytes": max(restart_peaks),
        "schedule_lag": "skipped: the profile declares no schedules",
    }


def _cold_restarts(settings: ServerSettings,
                   restarts: int) -> tuple[list[float], list[float], list[int]]:
    """Start and stop ``restarts`` times: wall and CPU to socket ready, peak RSS at ready."""
    runs, cpu, peaks = [], [], []
    for _ in range(restarts):  # the first may meet a cold page cache; the least is reported
        restart = ServerProcess(settings)
        runs.append(round(restart.start(), 4))
        cpu.append(round(restart.ready_cpu_s, 4))
        peaks.append(restart.ready_peak_rss)
        reading = restart.stop()
        if reading.exit_code != 0:
            raise ConfigurationError("tay serve", f"a restart exited with {reading.exit_code}; "
                                     f"see {settings.log_path}")
    return runs, cpu, peaks


def _compacted_restarts(settings: ServerSettings, restarts: int,
                        job_states: dict[str, int]) -> dict[str, Any]:
    """One start whose clean stop compacts, then cold restarts of the compacted store. A
    compaction that changed any job's state is a failure, not a figure."""
    compacting = ServerProcess(replace(settings, compact_on_stop=True))
    compacting.start()
    stopped = compacting.stop()
    if stopped.exit_code != 0:
        raise ConfigurationError("tay serve --compact-on-stop on",
                                 f"exited with {stopped.exit_code}; see {settings.log_path}")
    facts = read_store_facts(settings.data_dir)
    if facts["job_states"] != job_states:
        raise ConfigurationError("tay serve --compact-on-stop on", (
            f"the compacted store holds {facts['job_states']}, before {job_states}"))
    runs, cpu, peaks = _cold_restarts(settings, restarts)
    return {
        "compacting_stop_s": round(stopped.stop_s, 4),
        "compacted_history_bytes": facts["history_bytes"],
        "compacted_restart_s": min(runs), "compacted_restart_runs_s": runs,
        "compacted_restart_cpu_s": min(cpu), "compacted_restart_cpu_runs_s": cpu,
        "compacted_restart_peak_rss_bytes": max(peaks),
    }


def _run_load(profile: Profile, socket_path: str, server_pid: int, show_progress: bool,
              label: str, sdk: str = "ours", syscalls: str = "on") -> dict[str, Any]:
    """Start the workers and producers (``sdk``), release the callers together, wait until
    every job executed. Returns the timings and the server's CPU and syscalls during the
    load (from the go signal until the last execution was counted)."""
    from .clients import PRODUCER, WORKER, ClientProcess

    workers = [ClientProcess.start(sdk, WORKER, {
        "socket": socket_path, "task": profile.task, "capacity": profile.worker_capacity})
        for _ in range(profile.worker_processes)]
    producers = []
    for number in range(profile.producer_processes):
        callers = list(range(number, profile.callers, profile.producer_processes))
        if callers:
            producers.append(ClientProcess.start(sdk, PRODUCER, {
                "socket": socket_path, "jobs": profile.jobs, "callers": profile.callers,
                "mine": callers, "task": profile.task, "queues": list(profile.queues),
                "payload_bytes": profile.payload_bytes, "retries": profile.retries}))
    try:
        _wait_ready(workers + producers, timeout_s=60.0)
        return _drive(profile, workers, producers, server_pid, show_progress, label,
                      syscalls)
    finally:
        for client in workers + producers:
            client.stop()


def _drive(profile: Profile, workers: list[Any], producers: list[Any], server_pid: int,
           show_progress: bool, label: str, syscalls: str = "on") -> dict[str, Any]:
    bar = ProgressBar(f"{profile.name} {label}", profile.jobs) if show_progress else None
    deadline = time.monotonic() + max(120.0, profile.jobs / 20.0)
    server = psutil.Process(server_pid)
    # perf's syscall tracepoints cost the server CPU of their own (docs/benchmarks.md)
    counter = SyscallCounter(None, "not counted (--syscalls off)") if syscalls == "off" \
        else SyscallCounter.attach(server_pid, by_kind=syscalls == "by-kind")
    worker_cpu = ClientCpu(workers)  # producers report their own (they exit when done)
    before_user, before_system = engine_cpu(server.cpu_times())
    threads_before = snapshot(server_pid)
    started = time.monotonic()
    for producer in producers:
        producer.send("go")
    done = 0
    executed_at_inserts_done = None  # as the workers last reported it (every 20 ms)
    while done < profile.jobs or any(p.result is None for p in producers):
        for client in workers + producers:
            if client.process.poll() is not None and client.result is None:
                raise ConfigurationError("bench", f"a client process exited with "
                                         f"{client.process.returncode}: {client.error}")
        done = sum(worker.count for worker in workers)
        if executed_at_inserts_done is None and all(p.result is not None for p in producers):
            executed_at_inserts_done = done
        if bar:
            bar.update(done, f"inserted {sum(p.count for p in producers)}")
        if time.monotonic() > deadline:
            raise ConfigurationError("bench", f"timed out: {done}/{profile.jobs} executed, "
                                              f"{sum(p.count for p in producers)} inserted")
        time.sleep(0.01)
    harness_elapsed = time.monotonic() - started
    if executed_at_inserts_done is None:  # the last results came in after the last poll
        executed_at_inserts_done = done
    after_user, after_system = engine_cpu(server.cpu_times())
    threads_after = snapshot(server_pid)
    worker_s = worker_cpu.used_s()
    syscalls = counter.stop()
    if bar:
        bar.finish(done, f"inserted {profile.jobs}")
    time.sleep(SETTLE_S)
    producer_s = sum(producer.result.get("cpu_s", 0.0) for producer in producers)
    round_trips = array("d")
    for producer in producers:
        round_trips.frombytes(base64.b64decode(producer.result["round_trips"]))
    return {"first_send_ns": min(p.result["first_send_ns"] for p in producers
                                 if p.result["first_send_ns"]),
            "last_ack_ns": max(p.result["last_ack_ns"] for p in producers),
            "executed_at_inserts_done": executed_at_inserts_done,
            "round_trips": list(round_trips), "harness_elapsed_s": harness_elapsed,
            "load_cpu_user_s": after_user - before_user,
            "load_cpu_system_s": after_system - before_system,
            "load_syscalls": syscalls,
            "load_threads": by_role(server_pid, threads_before, threads_after),
            "worker_cpu_s": worker_s, "producer_cpu_s": producer_s}


class ClientCpu:
    """user+sys CPU of client processes from now until ``used_s`` (None if unreadable)."""

    def __init__(self, clients: list[Any]) -> None:
        self._processes = []
        for client in clients:
            try:
                process = psutil.Process(client.process.pid)
                self._processes.append((process, process.cpu_times()))
            except psutil.Error:
                pass

    def used_s(self) -> float | None:
        total = 0.0
        try:
            for process, before in self._processes:
                after = process.cpu_times()
                total += (after.user - before.user) + (after.system - before.system)
        except psutil.Error:
            return None
        return total


def _wait_ready(clients: list[Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for client in clients:
        while not client.ready.wait(0.05):
            if client.process.poll() is not None:
                raise ConfigurationError("bench", f"a client process exited with "
                                         f"{client.process.returncode} before it was ready: "
                                         f"{client.error}")
            if time.monotonic() > deadline:
                raise ConfigurationError("bench", "client processes not ready after "
                                                  f"{timeout_s} s")


def _fresh_run_dir(root: str, name: str) -> str:
    os.makedirs(root, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = os.path.join(root, f"{name}-{stamp}")
    suffix = 0
    while os.path.exists(path):
        suffix += 1
        path = os.path.join(root, f"{name}-{stamp}-{suffix}")
    os.makedirs(path)
    return path


def machine_facts(path: str) -> dict[str, Any]:
    """nproc, CPU model, kernel and the filesystem type holding ``path``."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "machine": platform.machine(), "python": platform.python_version(),
            "filesystem": _filesystem_type(path),
            "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the box
            # TAY_* variables reach the served engine (e.g. its writer's real-time priority)
            "server_environment": server_environment()}


def server_environment(environ: "dict[str, str] | None" = None) -> dict[str, str]:
    """The ``TAY_*`` variables the benchmark's ``tay serve`` inherits, except where the
    bench itself keeps its files: they change what is measured, so the report names them."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in sorted(env.items())
            if name.startswith("TAY_") and name != "TAY_BENCH_DIR"}


def _filesystem_type(path: str) -> str:
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                mount_point = fields[1]
                if (path == mount_point or path.startswith(mount_point.rstrip("/") + "/")) \
                        and len(mount_point) >= len(best):
                    best, kind = mount_point, fields[2]
    except OSError:
        pass
    return kind
