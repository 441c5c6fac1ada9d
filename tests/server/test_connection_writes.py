"""Socket writes are batched per loop turn: every frame queued in one turn leaves in one
``transport.write``, in order, and nothing queued is lost when the connection closes."""

from __future__ import annotations

import asyncio

import orjson

from tay.engine.effects import Reply
from tay.server.uds.connection import Connection
from tay.server.uds.listener import Listener
from tay.protocol.limits import ProtocolLimits
from tests.http.conftest import FakeTransport


class CountingTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.writes.append(data)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass


class DriverSink:
    """Only the attach/detach/submit surface a connection uses."""

    def __init__(self) -> None:
        self.sinks: dict = {}
        self.submitted: list = []
        self.idle = True

    def attach(self, conn, sink) -> None:
        self.sinks[conn] = sink

    def detach(self, conn) -> None:
        self.sinks.pop(conn, None)

    def submit(self, command) -> None:
        self.submitted.append(command)


def frames(data: bytes) -> list[dict]:
    out = []
    while data:
        size = int.from_bytes(data[:4], "big")
        out.append(orjson.loads(data[4:4 + size]))
        data = data[4 + size:]
    return out


def open_connection() -> tuple[Connection, CountingTransport]:
    listener = Listener(DriverSink(), ProtocolLimits())  # type: ignore[arg-type]
    connection = Connection(listener)
    transport = CountingTransport()
    transport.protocol = connection  # close() reports connection_lost, as real transports do
    connection.connection_made(transport)
    return connection, transport


def test_replies_of_one_turn_leave_in_one_write_in_order() -> None:
    async def main() -> None:
        connection, transport = open_connection()
        for n in range(5):
            connection.deliver(Reply(connection, f"r{n}", "accepted", {"n": n}))
        assert transport.writes == []  # queued until the end of this turn
        await asyncio.sleep(0)
        assert len(transport.writes) == 1
        assert [f["request_id"] for f in frames(transport.writes[0])] == [f"r{n}" for n in range(5)]
        connection.deliver(Reply(connection, "later", "accepted", {}))
        await asyncio.sleep(0)
        assert len(transport.writes) == 2

    asyncio.run(main())


def test_a_fatal_frame_flushes_queued_replies_before_closing() -> None:
    async def main() -> None:
        connection, transport = open_connection()
        connection.deliver(Reply(connection, "r1", "accepted", {}))
        connection.data_received((5).to_bytes(4, "big") + b"{oops")
        assert transport.closed
        sent = frames(bytes(transport.written))
        assert sent[0]["request_id"] == "r1"
        assert sent[-1]["type"] == "error" and sent[-1]["error"]["code"] == "malformed_json"
        await asyncio.sleep(0)
        assert frames(bytes(transport.written)) == sent  # nothing written after the close

    asyncio.run(main())


def test_listener_close_flushes_queued_replies() -> None:
    async def main() -> None:
        connection, transport = open_connection()
        connection.deliver(Reply(connection, "r1", "accepted", {}))
        await connection.listener.close()
        assert transport.closed
        assert [f["request_id"] for f in frames(bytes(transport.written))] == ["r1"]

    asyncio.run(main())
