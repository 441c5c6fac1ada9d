"""RQ on Redis with ``appendonly yes`` and ``appendfsync always`` (or ``no``). Producers
enqueue a no-op function into queue alpha (even jobs) or beta (odd); two ``SimpleWorker``
processes per queue run it in-process. Completion is polled from the finished-job
registries every 5 ms (so the last completion time is accurate to about 5 ms)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from .common import (MissingPeer, Workload, data_root, free_port, reap_processes, require_binary,
                     run_producers, start_daemon, stop_daemon)


def _modules() -> tuple[Any, Any]:
    try:
        import redis
        import rq
    except ImportError:
        raise MissingPeer("the rq/redis clients are missing: pip install rq redis") from None
    return redis, rq


@dataclass(frozen=True)
class RQPut:
    port: int
    workload: Workload

    def __call__(self) -> Callable[[int], None]:
        redis, rq = _modules()
        connection = redis.Redis(host="127.0.0.1", port=self.port)
        queues = [rq.Queue(name, connection=connection) for name in self.workload.queues]
        args = {"account_key": "benchmark-account", "payload": "x" * self.workload.payload_bytes,
                "version": 1}

        def put(index: int) -> None:
            queues[index % len(queues)].enqueue("benchmarks.peers.rq_tasks.no_op",
                                                kwargs=args, result_ttl=3600)
        return put


def worker(port: int, queue: str) -> None:
    redis, rq = _modules()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    connection = redis.Redis(host="127.0.0.1", port=port)
    rq.SimpleWorker([rq.Queue(queue, connection=connection)],
                    connection=connection).work(logging_level="WARNING")


def _wait_for_workers(rq: Any, connection: Any, expected: int, timeout_s: float = 60.0) -> None:
    """Start the clock only once every worker has registered (imports are not the peer's cost)."""
    deadline = time.monotonic() + timeout_s
    while rq.Worker.count(connection=connection) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rq: fewer than {expected} workers after {timeout_s} s")
        time.sleep(0.02)


def run(workload: Workload, fsync_always: bool) -> dict[str, Any]:
    binary = require_binary("redis-server", "redis-server")
    redis, rq = _modules()
    with tempfile.TemporaryDirectory(prefix="peer-redis-", dir=data_root()) as directory:
        port = free_port()
        daemon = start_daemon([
            binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", directory,
            "--appendonly", "yes", "--appendfsync", "always" if fsync_always else "no",
            "--save", "", "--daemonize", "no"], port, os.path.join(directory, "redis.log"))
        context = multiprocessing.get_context("spawn")
        workers = [context.Process(target=worker, daemon=True, args=(port, name))
                   for name in workload.queues for _ in range(workload.consumers_per_queue)]
        for process in workers:
            process.start()
        connection = redis.Redis(host="127.0.0.1", port=port)
        registries = [rq.registry.FinishedJobRegistry(name, connection=connection)
                      for name in workload.queues]
        _wait_for_workers(rq, connection, len(workers))

        def wait_done(deadline: float) -> float:
            while sum(registry.count for registry in registries) < workload.jobs:
                if time.monotonic() > deadline:
                    raise RuntimeError("rq: jobs not finished before the timeout")
                time.sleep(0.005)
            return time.time()

        try:
            result = run_producers(RQPut(port, workload), workload, wait_done)
        finally:
            for process in workers:
                process.terminate()
            reap_processes(workers, 5)
            stop_daemon(daemon)
    label = "RQ on Redis, appendfsync always" if fsync_always \
        else "RQ on Redis, appendfsync no"
    return {"peer": label, "fsync": fsync_always, **result}
