"""Shared helpers for engine tests: a deterministic engine and a small driver."""

from __future__ import annotations

import random

import pytest

from tay.engine import Engine, EngineConfig, Execute, Outcome, Refuse, Reply
from tay.engine import commands as c

T0 = 1_700_000_000_000  # wall clock of the tests
M0 = 5_000  # monotonic clock of the tests


class Driver:
    """Drives an engine with a fake clock and records every persisted event."""

    def __init__(self, config: EngineConfig | None = None, seed: int = 7) -> None:
        self.engine = Engine(config or EngineConfig(), random.Random(seed))
        self.now = T0
        self.mono = M0
        self.journal: list[tuple[int, object]] = []
        self._request = 0

    def advance(self, ms: int) -> None:
        self.now += ms
        self.mono += ms

    def run(self, command) -> Outcome:
        out = self.engine.handle(command, self.now, self.mono)
        self.journal.extend(out.events)
        return out

    def tick(self) -> Outcome:
        out = self.engine.tick(self.now, self.mono)
        self.journal.extend(out.events)
        return out

    def rid(self) -> str:
        self._request += 1
        return f"r{self._request}"

    def worker(self, conn="w1", tasks=("t",), capacity=4, runtime_id=None, queue=None) -> Outcome:
        self.run(c.Connect(conn, "worker", runtime_id or f"rt-{conn}", capacity, queue, self.rid()))
        return self.run(c.RegisterTasks(conn, tuple(tasks), self.rid()))

    def enqueue(self, task="t", args=None, conn="p", **options) -> Outcome:
        return self.run(c.Enqueue(conn, self.rid(), task, {} if args is None else args, options))

    def job_id(self, **options) -> str:
        return reply(self.enqueue(**options)).fields["job_id"]

    def status(self, job_id: str) -> dict:
        return reply(self.run(c.Status("p", self.rid(), job_id))).fields["job"]

    def succeed(self, execute: Execute, result=None, conn=None) -> Outcome:
        return self.run(c.Succeeded(conn or execute.conn, self.rid(), execute.reservation_id,
                                    execute.execution_id, result))

    def fail(self, execute: Execute, error=None, conn=None) -> Outcome:
        return self.run(c.Failed(conn or execute.conn, self.rid(), execute.reservation_id,
                                 execute.execution_id, error or {"type": "E", "message": "boom"}))


def reply(out: Outcome) -> Reply:
    replies = [effect for effect in out.effects if isinstance(effect, (Reply, Refuse))]
    assert len(replies) == 1, out.effects
    if isinstance(replies[0], Refuse):
        raise AssertionError(f"refused: {replies[0].failure.wire_error()}")
    return replies[0]


def refusal(out: Outcome) -> dict:
    refused = [effect for effect in out.effects if isinstance(effect, Refuse)]
    assert len(refused) == 1, out.effects
    assert not out.events
    return refused[0].failure.wire_error()


def executes(out: Outcome) -> list[Execute]:
    return [effect for effect in out.effects if isinstance(effect, Execute)]


@pytest.fixture
def driver() -> Driver:
    return Driver()
