"""Which requests of one connection get a per-request deadline (``request_timeout``).

Only requests that wait for an engine answer and hold a pending slot get one: ``enqueue``,
the job reads (``status``, ``result``, ``cancel``), the schedule requests and the operations
API. ``hello``, task (un)registration and the execution reports (``started``,
``succeeded``, ``failed``: answered ``accepted`` after their commit, and a worker never
waits on them for a slot) get none, nor do the requests the session answers itself. The
driver here swallows every command, so each request with a deadline is answered by its
timer and nothing else is.
"""

from __future__ import annotations

import asyncio

import orjson

from tay.protocol.admin_api import SOCKET_TYPES
from tay.protocol.limits import ProtocolLimits
from tay.server.uds.connection import Connection
from tay.server.uds.listener import Listener
from tests.server.test_connection_writes import CountingTransport, frames

TIMEOUT_MS = 20
JOB = "0123456789abcdef0123456789abcdef"
IDS = {"reservation_id": "r1", "execution_id": "e1"}
# request_id -> the message after hello; the first group must time out, the second not
WITH_DEADLINE = {
    "enq": {"type": "enqueue", "task": "t.v1", "args": {}},
    "st": {"type": "status", "job_id": JOB},
    "res": {"type": "result", "job_id": JOB},
    "can": {"type": "cancel", "job_id": JOB},
    "sch": {"type": "schedule", "schedule_id": "s", "task": "t.v1"},
    "csch": {"type": "cancel_schedule", "schedule_id": "s"},
    "lsch": {"type": "schedules"},
    "ssch": {"type": "schedule_status", "schedule_id": "s"},
    **{f"adm-{op}": {"type": kind} for kind, op in sorted(SOCKET_TYPES.items())[:3]},
}
WITHOUT_DEADLINE = {
    "reg": {"type": "register_tasks", "tasks": ["t.v1"]},
    "started": {"type": "started", **IDS},
    "succeeded": {"type": "succeeded", **IDS, "result": None},
    "failed": {"type": "failed", **IDS, "error": {"type": "E", "message": "m"}},
    "unreg": {"type": "unregister_tasks", "tasks": ["t.v1"]},
    "hb": {"type": "heartbeat"},
    "ping": {"type": "ping"},
}


class SwallowingDriver:
    """Takes every command and never answers (a commit that never becomes durable)."""

    def __init__(self) -> None:
        self.sinks: dict = {}
        self.submitted: list = []
        self.answered: list = []
        self.idle = True

    def attach(self, conn, sink) -> None:
        self.sinks[conn] = sink

    def detach(self, conn) -> None:
        self.sinks.pop(conn, None)

    def submit(self, command, admit_bytes=None) -> None:
        self.submitted.append(command)

    def answer(self, effects) -> None:
        self.answered.extend(effects)


def frame(request_id: str, message: dict) -> bytes:
    payload = orjson.dumps({"version": 1, "request_id": request_id, **message})
    return len(payload).to_bytes(4, "big") + payload


def worker_connection(driver: SwallowingDriver, timeout_ms: int) -> tuple[Connection, CountingTransport]:
    """A connection on ``driver`` whose worker has said hello (in a running loop)."""
    listener = Listener(driver, ProtocolLimits(request_timeout_ms=timeout_ms))  # type: ignore[arg-type]
    connection = Connection(listener)
    transport = CountingTransport()
    transport.protocol = connection
    connection.connection_made(transport)
    connection.data_received(frame("h", {"type": "hello", "mode": "worker",
                                         "runtime_id": "w", "max_concurrency": 4}))
    return connection, transport


def run(requests: dict[str, dict]) -> tuple[list[dict], Connection, SwallowingDriver]:
    async def main() -> tuple[list[dict], Connection, SwallowingDriver]:
        driver = SwallowingDriver()
        connection, transport = worker_connection(driver, TIMEOUT_MS)
        connection.data_received(b"".join(frame(rid, msg) for rid, msg in requests.items()))
        await asyncio.sleep(TIMEOUT_MS / 1000 * 8)
        return frames(b"".join(transport.writes)), connection, driver

    return asyncio.run(main())


def timed_out(replies: list[dict]) -> list[str]:
    return [reply["request_id"] for reply in replies
            if reply["type"] == "error" and reply["error"]["code"] == "request_timeout"]


def test_exactly_the_forwarded_requests_get_a_deadline() -> None:
    replies, connection, driver = run({**WITH_DEADLINE, **WITHOUT_DEADLINE})
    assert sorted(timed_out(replies)) == sorted(WITH_DEADLINE)
    # every request reached the engine or its answer path; none was refused on the wire
    assert not [r for r in replies if r["type"] == "error"
                and r["error"]["code"] != "request_timeout"]
    assert connection.session.pending == 0  # every timed-out request freed its slot
    assert len(connection._deadlines) == 0


def test_execution_reports_get_no_deadline_even_when_never_answered() -> None:
    reports = {rid: msg for rid, msg in WITHOUT_DEADLINE.items()
               if msg["type"] in ("started", "succeeded", "failed")}
    replies, connection, driver = run(reports)
    assert timed_out(replies) == []
    assert [type(command).__name__ for command in driver.submitted[1:]] == \
        ["Started", "Succeeded", "Failed"]
    assert connection.session.pending == 0


def test_a_reply_settles_only_a_request_that_waits_for_it() -> None:
    """The ``accepted`` of a report (no deadline) frees no pending slot and leaves other
    requests' deadlines as they are; the answer of a forwarded request settles it."""
    from tay.engine.effects import Reply

    async def main() -> tuple[list, list[dict]]:
        connection, transport = worker_connection(SwallowingDriver(), 60_000)
        connection.data_received(frame("enq", WITH_DEADLINE["enq"])
                                 + frame("started", WITHOUT_DEADLINE["started"]))
        states = [(connection.session.pending, len(connection._deadlines))]
        connection.deliver(Reply(connection, "started", "accepted", {}))
        states.append((connection.session.pending, len(connection._deadlines)))
        connection.deliver(Reply(connection, "enq", "enqueued", {"job_id": JOB}))
        states.append((connection.session.pending, len(connection._deadlines)))
        await asyncio.sleep(0)
        connection.connection_lost(None)
        return states, frames(b"".join(transport.writes))

    states, replies = asyncio.run(main())
    assert states == [(1, 1), (1, 1), (0, 0)]
    assert [(r["type"], r["request_id"]) for r in replies if r["request_id"] != "h"] == [
        ("accepted", "started"), ("enqueued", "enq")]
