"""beanstalkd with its binlog: ``-b DIR -f 0`` (fsync on every write) or ``-b DIR -F``
(binlog without fsync). Producers ``put`` into tube alpha (even jobs) or beta (odd);
two consumer processes per tube ``reserve`` and ``delete`` (the delete ack is completion)."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from .common import (MissingPeer, Workload, data_root, free_port, reap_processes, require_binary,
                     run_producers, start_daemon, stop_daemon)


def _client_module() -> Any:
    try:
        import greenstalk
    except ImportError:
        raise MissingPeer("the greenstalk client is missing: pip install greenstalk") from None
    return greenstalk


@dataclass(frozen=True)
class BeanstalkPut:
    """Picklable per-thread connection factory for the producer processes."""

    port: int
    workload: Workload

    def __call__(self) -> Callable[[int], None]:
        client = _client_module().Client(("127.0.0.1", self.port))
        body, tubes, current = self.workload.body(), self.workload.queues, [None]

        def put(index: int) -> None:
            tube = tubes[index % len(tubes)]
            if current[0] != tube:
                client.use(tube)
                current[0] = tube
            client.put(body)
        return put


def consumer(port: int, tube: str, done: Any, last_done: Any, stop: Any, ready: Any) -> None:
    client = _client_module().Client(("127.0.0.1", port), watch=tube)
    ready.set()
    timed_out = _client_module().TimedOutError
    while not stop.is_set():
        try:
            job = client.reserve(timeout=1)
        except timed_out:
            continue
        client.delete(job)
        finished = time.time()
        with done.get_lock():
            done.value += 1
        with last_done.get_lock():
            last_done.value = max(last_done.value, finished)


def run(workload: Workload, fsync_every_write: bool) -> dict[str, Any]:
    binary = require_binary("beanstalkd", "beanstalkd")
    _client_module()
    with tempfile.TemporaryDirectory(prefix="peer-beanstalkd-", dir=data_root()) as directory:
        port = free_port()
        binlog = os.path.join(directory, "binlog")
        os.mkdir(binlog)
        flags = ["-f", "0"] if fsync_every_write else ["-F"]
        daemon = start_daemon([binary, "-l", "127.0.0.1", "-p", str(port), "-b", binlog, *flags],
                              port, os.path.join(directory, "beanstalkd.log"))
        context = multiprocessing.get_context("spawn")
        done, last_done, stop = context.Value("q", 0), context.Value("d", 0.0), context.Event()
        readies = [context.Event() for _ in range(len(workload.queues)
                                                  * workload.consumers_per_queue)]
        tubes = [tube for tube in workload.queues for _ in range(workload.consumers_per_queue)]
        consumers = [context.Process(target=consumer, daemon=True,
                                     args=(port, tube, done, last_done, stop, ready))
                     for tube, ready in zip(tubes, readies)]
        for process in consumers:
            process.start()
        if not all(ready.wait(60) for ready in readies):
            raise RuntimeError("beanstalkd consumers not connected after 60 s")

        def wait_done(deadline: float) -> float:
            while done.value < workload.jobs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"beanstalkd: {done.value}/{workload.jobs} after timeout")
                time.sleep(0.005)
            return last_done.value

        try:
            result = run_producers(BeanstalkPut(port, workload), workload, wait_done)
        finally:
            stop.set()
            reap_processes(consumers, 5)
            stop_daemon(daemon)
    label = "beanstalkd -b -f 0 (fsync every write)" if fsync_every_write \
        else "beanstalkd -b -F (binlog, no fsync)"
    return {"peer": label, "fsync": fsync_every_write, **result}

