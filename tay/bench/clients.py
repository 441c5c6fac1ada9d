"""Producer and worker process bodies (run in their own processes via ``multiprocessing``
with the ``spawn`` start method, so each is a fresh interpreter like a real deployment).

Producers: caller ``c`` submits every job ``i`` with ``i % callers == c``, one at a time,
timing each insert round trip (send to durable acknowledgement). Workers: our SDK with a
no-op async handler; each bumps a shared counter per execution for the progress bar.

Both run the SDK on uvloop (as the server does): on a 2-core box the clients' CPU per job
is part of the measured system, and the stdlib loop roughly doubles their loop overhead.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from dataclasses import dataclass
from typing import Any

import uvloop

from .profile import Profile


@dataclass(frozen=True)
class ProducerPlan:
    socket_path: str
    profile: Profile
    callers: tuple[int, ...]  # the caller numbers this process runs


def producer_main(plan: ProducerPlan, ready: Any, go: Any, submitted: Any, results: Any) -> None:
    """Connect, signal ready, wait for ``go``, run the callers, send back the timings."""
    try:
        outcome = uvloop.run(_produce(plan, ready, go, submitted))
    except BaseException as error:  # the harness must hear about it, not hang
        outcome = {"error": f"{type(error).__name__}: {error}"}
    results.put(outcome)


async def _produce(plan: ProducerPlan, ready: Any, go: Any, submitted: Any) -> dict[str, Any]:
    from tay import Tay

    profile = plan.profile
    args = profile.job_args()
    round_trips = array("d")
    first_send_ns: list[int] = []

    async def caller(number: int, tay: Tay) -> None:
        for index in range(number, profile.jobs, profile.callers):
            if not first_send_ns:
                first_send_ns.append(time.time_ns())
            started = time.perf_counter()
            await tay.enqueue(profile.task, args, queue=profile.queue_for(index),
                              retries=profile.retries)
            round_trips.append(time.perf_counter() - started)
            with submitted.get_lock():
                submitted.value += 1

    async with Tay(mode="client", socket_path=plan.socket_path,
                   request_timeout=900.0) as tay:
        ready.set()
        while not go.is_set():
            await asyncio.sleep(0.001)
        await asyncio.gather(*(caller(number, tay) for number in plan.callers))
    return {"first_send_ns": first_send_ns[0] if first_send_ns else None,
            "round_trips": round_trips.tobytes()}


def worker_main(socket_path: str, task_name: str, capacity: int, ready: Any, stop: Any,
                executed: Any) -> None:
    uvloop.run(_work(socket_path, task_name, capacity, ready, stop, executed))


async def _work(socket_path: str, task_name: str, capacity: int, ready: Any, stop: Any,
                executed: Any) -> None:
    from tay import Tay

    tay = Tay(mode="worker", socket_path=socket_path, capacity=capacity)

    @tay.task(name=task_name, retries=0)
    async def no_op(account_key: str, payload: str, version: int) -> None:
        executed.value += 1  # one writer per counter: this process's own Value

    async with tay:
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.02)
