"""What the clients of one server life saw: the ledger crash tests check a restart against.

Producers record every acknowledged enqueue (with the job the reply described) and every
submission whose outcome is unknown; the worker records each execution it received and each
completion the server acknowledged. Results carry the server ``life`` that ran the job, so a
completed job that ran again after a restart would show a different result.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.crash.wire import ConnectionLost, WireClient, serve_executions

TASK = "crash.echo.v1"
DEFINITION_FIELDS = ("id", "task", "args", "max_attempts", "queue", "durability")


@dataclass
class Ledger:
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)  # submission_id -> job
    unknown: dict[str, dict[str, Any]] = field(default_factory=dict)  # submission_id -> args
    executed: dict[str, int] = field(default_factory=dict)  # job_id -> life that got execute
    completed: dict[str, Any] = field(default_factory=dict)  # job_id -> acknowledged result
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # set on every entry

    def job_ids(self) -> set[str]:
        return {job["id"] for job in self.acked.values()}

    def note(self) -> None:
        self.progress.set()

    async def reached(self, what: str, predicate: Callable[["Ledger"], bool],
                      timeout: float) -> None:
        """Wait until ``predicate(self)`` holds, woken by each new entry (never a fixed sleep);
        fails naming ``what`` if the clients make no such progress within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while not predicate(self):
                    self.progress.clear()
                    await self.progress.wait()
        except TimeoutError:
            raise AssertionError(
                f"not reached in {timeout}s: {what} (acked={len(self.acked)} "
                f"executed={len(self.executed)} completed={len(self.completed)})") from None


def expected_result(args: dict[str, Any], life: int) -> dict[str, Any]:
    return {"echo": args["n"], "producer": args["producer"], "life": life}


async def produce(socket_path: str, ledger: Ledger, producer: int, count: int,
                  rng: random.Random, prefix: str) -> None:
    """Enqueue ``count`` jobs with submission ids, pipelined a few at a time."""
    try:
        client = await WireClient.connect(socket_path)
    except (ConnectionLost, OSError):
        return
    window = rng.randint(1, 8)

    async def one(index: int) -> None:
        submission = f"{prefix}-p{producer}-{index}"
        args = {"n": index, "producer": producer, "pad": "x" * rng.randint(0, 300)}
        ledger.unknown[submission] = args
        try:
            reply = await client.request("enqueue", task=TASK, args=args,
                                         options={"submission_id": submission})
        except ConnectionLost:
            return
        if reply["type"] == "enqueued":
            del ledger.unknown[submission]
            ledger.acked[submission] = reply["job"]
            ledger.note()
        # an error reply leaves the submission unknown: the restart resubmits it

    try:
        for start in range(0, count, window):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + window))))
    finally:
        await client.close()


async def work(socket_path: str, ledger: Ledger, life: int, capacity: int,
               stop: asyncio.Event) -> list[str]:
    """Execute every job pushed to this worker until ``stop``; returns the job ids received."""
    client = await WireClient.connect(socket_path, "worker", capacity)
    await client.request("register_tasks", tasks=[TASK])
    received: list[str] = []

    async def execute(frame: dict[str, Any]) -> None:
        ids = {"reservation_id": frame["reservation_id"],
               "execution_id": frame["execution_id"], "job_id": frame["job_id"]}
        result = expected_result(frame["args"], life)
        try:
            await client.request("started", **ids)
            reply = await client.request("succeeded", result=result, **ids)
        except ConnectionLost:
            return
        if reply["type"] == "accepted":
            ledger.completed[frame["job_id"]] = result
            ledger.note()

    def note_received(frame: dict[str, Any]) -> None:
        received.append(frame["job_id"])
        ledger.executed.setdefault(frame["job_id"], life)
        ledger.note()

    try:
        await serve_executions(client, stop, execute, note_received)
    finally:
        await client.close()
    return received
