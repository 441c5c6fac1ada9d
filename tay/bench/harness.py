"""One measured run of a profile in one commit mode.

Order: fresh store -> ``tay serve`` (own process) -> worker processes register -> producer
processes connect -> all callers start together -> wait for every execution -> stop
workers and server (reading peak RSS, CPU and commit counters) -> read the journal
offline -> cold restart (spawn to accepted connect, peak RSS) -> stop.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import shutil
import tempfile
import time
from array import array
from dataclasses import dataclass
from typing import Any

from tay.failures import ConfigurationError

from .clients import ProducerPlan, producer_main, worker_main
from .journal_facts import read_store_facts
from .metrics import latency_summary_ms, rate
from .profile import Profile
from .progress import ProgressBar
from .report import write_json
from .server import ServerProcess, ServerSettings

MAX_SOCKET_PATH = 100
SETTLE_S = 0.3  # after the last execution, let its finish report reach the journal


@dataclass(frozen=True)
class CommitMode:
    label: str
    max_events: int
    interval_ms: int


def run_mode(profile: Profile, mode: CommitMode, root: str, *, durability: str,
             show_progress: bool = True, keep_data: bool = False) -> dict[str, Any]:
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
        result = _measure(profile, mode, settings, show_progress)
        write_json(result, os.path.join(run_dir, "result.json"))  # survives a later failure
        return result
    finally:
        if socket_dir:
            shutil.rmtree(socket_dir, ignore_errors=True)
        if not keep_data:
            shutil.rmtree(settings.data_dir, ignore_errors=True)


def _measure(profile: Profile, mode: CommitMode, settings: ServerSettings,
             show_progress: bool) -> dict[str, Any]:
    server = ServerProcess(settings)
    empty_startup_s = server.start()
    try:
        load = _run_load(profile, settings.socket_path, server.pid, show_progress, mode.label)
    finally:
        reading = server.stop()
    facts = read_store_facts(settings.data_dir)
    restart = ServerProcess(settings)
    restart_s = restart.start()
    restart_peak = restart.ready_peak_rss
    restart.stop()
    first_send_s = load["first_send_ns"] / 1e9
    last_finish_s = (facts["last_finished_at_ms"] or 0) / 1000.0
    completed = facts["job_states"].get("completed", 0)
    return {
        "profile": profile.name, "mode": mode.label, "durability": settings.durability,
        "group_commit": {"max_events": mode.max_events, "interval_ms": mode.interval_ms},
        "jobs": profile.jobs, "completed": completed,
        "callers": profile.callers, "producer_processes": profile.producer_processes,
        "worker_processes": profile.worker_processes, "worker_capacity": profile.worker_capacity,
        "jobs_per_s": round(rate(completed, last_finish_s - first_send_s), 2),
        "elapsed_s": round(last_finish_s - first_send_s, 4),
        "harness_elapsed_s": round(load["harness_elapsed_s"], 4),
        "insert_rtt_ms": latency_summary_ms(load["round_trips"]),
        "events": facts["job_lifecycle_events"], "expected_events": profile.expected_events,
        "events_by_name": facts["events_by_name"], "history_bytes": facts["history_bytes"],
        "segments": facts["segments"], "job_states": facts["job_states"],
        "fsyncs": (reading.commit_stats or {}).get("fsyncs"),
        "commit_stats": reading.commit_stats,
        "empty_startup_s": round(empty_startup_s, 4),
        "engine_max_rss_bytes": reading.peak_rss_bytes,
        "engine_cpu_user_s": round(reading.cpu_user_s, 3),
        "engine_cpu_system_s": round(reading.cpu_system_s, 3),
        "server_exit_code": reading.exit_code,
        "cold_restart_s": round(restart_s, 4), "cold_restart_peak_rss_bytes": restart_peak,
        "schedule_lag": "skipped: the profile declares no schedules",
    }


def _run_load(profile: Profile, socket_path: str, server_pid: int, show_progress: bool,
              label: str) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    workers, executed = [], []
    for _ in range(profile.worker_processes):
        ready, counter = context.Event(), context.Value("q", 0)
        process = context.Process(target=worker_main, daemon=True, args=(
            socket_path, profile.task, profile.worker_capacity, ready, stop, counter))
        process.start()
        workers.append((process, ready))
        executed.append(counter)
    go, submitted, results = context.Event(), context.Value("q", 0), context.Queue()
    producers = []
    for number in range(profile.producer_processes):
        callers = tuple(range(number, profile.callers, profile.producer_processes))
        if not callers:
            continue
        ready = context.Event()
        process = context.Process(target=producer_main, daemon=True, args=(
            ProducerPlan(socket_path, profile, callers), ready, go, submitted, results))
        process.start()
        producers.append((process, ready))
    try:
        _wait_ready(workers + producers, timeout_s=60.0)
        return _drive(profile, go, submitted, executed, results, len(producers), show_progress,
                      label)
    finally:
        stop.set()
        for process, _ in workers + producers:
            process.join(10.0)
            if process.is_alive():
                process.kill()
                process.join()


def _drive(profile: Profile, go: Any, submitted: Any, executed: list[Any], results: Any,
           producer_count: int, show_progress: bool, label: str) -> dict[str, Any]:
    bar = ProgressBar(f"{profile.name} {label}", profile.jobs) if show_progress else None
    deadline = time.monotonic() + max(120.0, profile.jobs / 20.0)
    outcomes: list[dict[str, Any]] = []
    started = time.monotonic()
    go.set()
    done = 0
    while done < profile.jobs or len(outcomes) < producer_count:
        while not results.empty() and len(outcomes) < producer_count:
            outcomes.append(results.get())
            if "error" in outcomes[-1]:
                raise ConfigurationError("producer", outcomes[-1]["error"])
        done = sum(counter.value for counter in executed)
        if bar:
            bar.update(done, f"inserted {submitted.value}")
        if time.monotonic() > deadline:
            raise ConfigurationError("bench", f"timed out: {done}/{profile.jobs} executed, "
                                              f"{submitted.value} inserted")
        time.sleep(0.01)
    harness_elapsed = time.monotonic() - started
    if bar:
        bar.finish(done, f"inserted {submitted.value}")
    time.sleep(SETTLE_S)
    round_trips = array("d")
    for outcome in outcomes:
        round_trips.frombytes(outcome["round_trips"])
    return {"first_send_ns": min(o["first_send_ns"] for o in outcomes if o["first_send_ns"]),
            "round_trips": list(round_trips), "harness_elapsed_s": harness_elapsed}


def _wait_ready(processes: list[tuple[Any, Any]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for process, ready in processes:
        while not ready.wait(0.05):
            if not process.is_alive():
                raise ConfigurationError("bench", f"a client process exited with "
                                                  f"{process.exitcode} before it was ready")
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
            "load_average_1m": round(os.getloadavg()[0], 2)}  # other work on the box


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
