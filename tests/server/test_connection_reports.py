"""Execution reports read by a connection become the engine's own commands for that
connection, field for field, whichever way the session read them (the plain reports the
frame scan reads at once, or the general route)."""

from __future__ import annotations

import asyncio

import orjson

from tay.engine.commands import Failed, Started, Succeeded
from tests.server.test_connection_writes import open_connection


def frame(message: dict) -> bytes:
    payload = orjson.dumps({"version": 1, **message})
    return len(payload).to_bytes(4, "big") + payload


def ids(n: int) -> dict:
    return {"request_id": f"q{n}", "reservation_id": f"r{n}", "execution_id": f"e{n}"}


def test_reports_become_the_engine_commands_of_the_connection() -> None:
    async def main() -> None:
        connection, _ = open_connection()
        connection.data_received(frame({"type": "hello", "request_id": "h", "mode": "worker",
                                        "runtime_id": "w1", "max_concurrency": 4}))
        submitted = connection.listener.driver.submitted
        del submitted[:]
        reports = [
            {"type": "started", **ids(1)},  # plain: read by the frame scan
            {"type": "succeeded", **ids(2)},  # plain, no result
            {"type": "succeeded", **ids(3), "result": {"n": [1, 2]}},  # the general route
            {"type": "started", **ids(4), "extra": True},
            {"type": "failed", **ids(5), "error": {"type": "E", "message": "m"}},
        ]
        connection.data_received(b"".join(frame(report) for report in reports))
        assert [(type(command), tuple(command)) for command in submitted] == [
            (Started, tuple(Started(connection, "q1", "r1", "e1"))),
            (Succeeded, tuple(Succeeded(connection, "q2", "r2", "e2", None))),
            (Succeeded, tuple(Succeeded(connection, "q3", "r3", "e3", {"n": [1, 2]}))),
            (Started, tuple(Started(connection, "q4", "r4", "e4"))),
            (Failed, tuple(Failed(connection, "q5", "r5", "e5",
                                  {"type": "E", "message": "m"}))),
        ]
        assert submitted[0].conn is connection and submitted[4].error == {"type": "E",
                                                                         "message": "m"}

    asyncio.run(main())
