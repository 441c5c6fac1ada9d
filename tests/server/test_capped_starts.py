"""Job starts a history cap refuses: the jobs stay available, and ``tay serve`` says so in a
rate-limited WARNING (how many since the last line, which cap, what to do)."""

from __future__ import annotations

import asyncio
import logging

from tay.server.lifecycle import CAPPED_REPEAT_S, Lifecycle
from tests.engine.conftest import executes, reply
from tests.engine.test_history_caps import capped


def test_capped_starts_are_logged_once_per_interval_with_the_count_since_the_last_line(caplog):
    driver = capped(max_history_bytes=4_000)
    driver.worker()
    job_ids: list[str] = []

    async def scenario() -> None:
        lifecycle = Lifecycle(driver=None, engine=driver.engine, drain_timeout_s=0)
        lifecycle.check_capped_starts(100.0)  # nothing refused yet: silent
        assert not caplog.records
        out = driver.enqueue()
        assert not executes(out)
        job_ids.append(reply(out).fields["job_id"])
        lifecycle.check_capped_starts(105.0)
        assert len(caplog.records) == 1
        for _ in range(3):
            driver.tick()
        lifecycle.check_capped_starts(105.0 + CAPPED_REPEAT_S - 1)  # too soon: held back
        assert len(caplog.records) == 1
        lifecycle.check_capped_starts(105.0 + CAPPED_REPEAT_S)
        assert len(caplog.records) == 2
        lifecycle.check_capped_starts(200.0 + CAPPED_REPEAT_S)  # no new refusal: silent
        assert len(caplog.records) == 2

    with caplog.at_level(logging.WARNING, logger="tay.server"):
        asyncio.run(scenario())
    first, second = (record.getMessage() for record in caplog.records)
    assert first.startswith("history cap reached (max_history_bytes): 1 job start(s) refused")
    assert "--max-history-bytes 4000" in first and "stay available" in first
    assert second.startswith("history cap reached (max_history_bytes): 3 job start(s) refused")
    job = driver.status(job_ids[0])
    assert (job["state"], job["attempt"]) == ("available", 0)
