"""Shared plumbing for peer runs: the workload shape, daemons in a temp directory,
producer processes (one thread per caller, each timing its own acknowledgements) and the
result record. Every wait is bounded."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable

from tay.bench.metrics import latency_summary_ms, rate
from tay.bench.paths import bench_root


@dataclass(frozen=True)
class Workload:
    jobs: int = 10_000
    callers: int = 8
    producer_processes: int = 2
    queues: tuple[str, ...] = ("alpha", "beta")
    consumers_per_queue: int = 2  # tay's alpha=2 beta=2 credits
    payload_bytes: int = 1024
    timeout_s: float = 600.0

    def body(self) -> bytes:
        return json.dumps({"account_key": "benchmark-account",
                           "payload": "x" * self.payload_bytes, "version": 1}).encode()


class MissingPeer(RuntimeError):
    """A peer's server binary or Python client is not installed; the message says how."""


# tay bench's directory: peers write to the same filesystem as tay's runs, so fsync costs
# compare (and, like them, never under the checkout: strict sync refuses /tmp).
BENCH_ROOT = str(bench_root())


def data_root() -> str:
    """``BENCH_ROOT``, created if missing."""
    os.makedirs(BENCH_ROOT, exist_ok=True)
    return BENCH_ROOT


def reap_processes(processes: list[Any], timeout_s: float) -> None:
    """Join each child process, killing any still alive after ``timeout_s``."""
    for process in processes:
        process.join(timeout_s)
        if process.is_alive():
            process.kill()


def require_binary(name: str, debian_package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingPeer(f"{name} not found: install it with "
                          f"`apt-get update && apt-get install -y {debian_package}`")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daemon(argv: list[str], port: int, log_path: str, timeout_s: float = 10.0
                 ) -> subprocess.Popen[bytes]:
    """Start ``argv`` and wait until 127.0.0.1:``port`` accepts a connection."""
    log = open(log_path, "ab")
    process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {process.returncode}; see {log_path}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if time.monotonic() > deadline:
                stop_daemon(process)
                raise RuntimeError(f"{argv[0]} not listening on {port} after {timeout_s} s")
            time.sleep(0.01)


def stop_daemon(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


PutFactory = Callable[[], Callable[[int], None]]  # per thread: connect, return put(index)


def producer_process(make_put: PutFactory, workload: Workload, callers: tuple[int, ...],
                     ready: Any, go: Any, results: Any) -> None:
    try:
        results.put(_produce(make_put, workload, callers, ready, go))
    except BaseException as error:
        results.put({"error": f"{type(error).__name__}: {error}"})


def _produce(make_put: PutFactory, workload: Workload, callers: tuple[int, ...], ready: Any,
             go: Any) -> dict[str, Any]:
    puts = [make_put() for _ in callers]
    round_trips, first_send = array("d"), []
    lock = threading.Lock()

    def caller(number: int, put: Callable[[int], None]) -> None:
        local = array("d")
        for index in range(number, workload.jobs, workload.callers):
            if not first_send:
                first_send.append(time.time())
            started = time.perf_counter()
            put(index)
            local.append(time.perf_counter() - started)
        with lock:
            round_trips.extend(local)

    ready.set()
    go.wait(60)
    threads = [threading.Thread(target=caller, args=(n, p)) for n, p in zip(callers, puts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"first_send": min(first_send), "round_trips": round_trips.tobytes()}


def run_producers(make_put: PutFactory, workload: Workload,
                  wait_done: Callable[[float], float]) -> dict[str, Any]:
    """Start producers, release them together, wait via ``wait_done(deadline)`` (returns the
    wall time of the last completion), and summarize."""
    context = multiprocessing.get_context("spawn")
    go, results, processes = context.Event(), context.Queue(), []
    for number in range(workload.producer_processes):
        callers = tuple(range(number, workload.callers, workload.producer_processes))
        ready = context.Event()
        process = context.Process(target=producer_process, daemon=True,
                                  args=(make_put, workload, callers, ready, go, results))
        process.start()
        processes.append((process, ready))
    try:
        for process, ready in processes:
            if not ready.wait(60):
                raise RuntimeError("peer producer not ready after 60 s")
        go.set()
        deadline = time.monotonic() + workload.timeout_s
        outcomes = [results.get(timeout=workload.timeout_s) for _ in processes]
        errors = [o["error"] for o in outcomes if "error" in o]
        if errors:
            raise RuntimeError(errors[0])
        last_completion = wait_done(deadline)
    finally:
        reap_processes([process for process, _ in processes], 10)
    round_trips = array("d")
    for outcome in outcomes:
        round_trips.frombytes(outcome["round_trips"])
    first = min(o["first_send"] for o in outcomes)
    return {"jobs": workload.jobs,
            "jobs_per_s": round(rate(workload.jobs, last_completion - first), 2),
            "elapsed_s": round(last_completion - first, 4),
            "ack_rtt_ms": latency_summary_ms(list(round_trips))}
