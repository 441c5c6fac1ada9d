"""Our SDK's schedule reads (pages, get_schedule, handle status) against `tay serve`."""

from __future__ import annotations

import asyncio

import pytest

from tay import Tay
from tay.errors import ServerError

from .harness import Server

pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def server():
    server = Server().start()
    yield server
    server.close()


def test_pages_get_schedule_and_not_found(server: Server) -> None:
    async def scenario() -> None:
        tay = Tay(socket_path=server.socket, mode="client")
        await tay.start()
        try:
            names = [f"ours-{index:02d}" for index in range(7)]
            for name in reversed(names):
                await tay.every("demo.add.v1", hours=1, declaration_id=name, delay=3600,
                                kwargs={"left": 1, "right": 1})
            first = await tay.schedule_page(limit=3)
            assert [item["id"] for item in first.schedules] == names[:3]
            assert first.next_cursor == names[2]
            assert [item["id"] for item in await tay.schedules(page_size=2)] == names
            one = await tay.get_schedule("ours-03")
            assert one["every_ms"] == 3_600_000 and one["args"] == {"left": 1, "right": 1}
            assert one["last_at"] is None and one["cancelled_at"] is None
            with pytest.raises(ServerError) as missing:
                await tay.get_schedule("no-such-schedule")
            assert missing.value.code == "schedule_not_found"
        finally:
            await tay.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
