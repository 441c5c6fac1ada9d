"""The server samples each queue's latency on its own (``AdminService.start_sampling``),
so the latency chart has the minutes nobody read the activity op in."""

from __future__ import annotations

import asyncio

from tay import Tay
from tay.engine import EngineConfig
from tay.server import admin as admin_module
from tay.server.admin import AdminService
from tay.testing import InMemoryEngine


def test_the_server_samples_a_held_queues_latency_until_stopped(monkeypatch):
    monkeypatch.setattr(admin_module, "LATENCY_SAMPLE_S", 0.05)

    async def scenario():
        async with InMemoryEngine(EngineConfig(queues={"held": 1})) as memory:
            engine = memory.engine
            service = AdminService(memory._driver, None, None)
            engine.paused.add("held")  # as a pause_queue would leave it (volatile here)
            tay = Tay(mode="client")
            memory.attach(tay)
            async with tay:
                await tay.enqueue("nobody.v1", {}, queue="held")
                service.start_sampling()
                try:
                    await asyncio.sleep(0.4)  # several samples; no activity read
                    now = memory._driver.wall_ms()
                    (row,) = engine.latency.per_minute(now, 8)
                    assert row["queue"] == "held" and 300 <= row["peak_ms"] <= now
                finally:
                    service.stop_sampling()
                peak = row["peak_ms"]
                await asyncio.sleep(0.2)
                assert engine.latency.per_minute(now, 8)[0]["peak_ms"] == peak  # stopped
    asyncio.run(scenario())
