"""Durable schedules through the REAL tay-client 1.4.0 against `tay serve` subprocesses.

The harness worker's ``demo.sleep.v1`` appends a line to ``<root>/<key>`` when it starts,
so a firing schedule is observed from the test process without asking the engine.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .harness import Server, wait_for_lines

pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def server():
    server = Server().start()
    server.start_worker(capacity=4)
    yield server
    server.close()


def test_every_fires_and_cancel_returns_the_cancelled_object(server: Server) -> None:
    handle_id = server.client("""
        handle = await tay.every("demo.sleep.v1", seconds=0.2, kwargs={"seconds": 0, "key": "tick"},
                                 declaration_id="conformance-every")
        return handle.id
    """)
    assert handle_id == "conformance-every"
    assert wait_for_lines(server.root / "tick", 2) >= 2  # fired at once, then again
    cancelled = server.client("""
        handle = await tay.every("demo.sleep.v1", seconds=0.2, kwargs={"seconds": 0, "key": "tick"},
                                 declaration_id="conformance-every")
        return await handle.cancel()
    """)
    assert cancelled["id"] == "conformance-every" and cancelled["cancelled_at"] is not None
    assert cancelled["kind"] == "every" and cancelled["every_ms"] == 200
    assert cancelled["last_at"] is not None and cancelled["next_at"] is None
    # No more firings, judged by the scheduler's own progress rather than a sleep: a second
    # schedule ("tock", same period) must fire twice (an occurrence the cancelled one had
    # already admitted starts meanwhile), then twice more with no new "tick" line.
    server.client("""
        return (await tay.every("demo.sleep.v1", seconds=0.2, kwargs={"seconds": 0, "key": "tock"},
                                declaration_id="conformance-tock")).id
    """)
    tock = server.root / "tock"
    assert wait_for_lines(tock, 2) >= 2
    fired = len((server.root / "tick").read_text().splitlines())
    seen = len(tock.read_text().splitlines())
    assert wait_for_lines(tock, seen + 2) >= seen + 2
    assert len((server.root / "tick").read_text().splitlines()) == fired
    server.client("""
        handle = await tay.every("demo.sleep.v1", seconds=0.2, kwargs={"seconds": 0, "key": "tock"},
                                 declaration_id="conformance-tock")
        return await handle.cancel()
    """)


def test_cron_schedule_declare_redeclare_cancel_and_refusals(server: Server) -> None:
    result = server.client("""
        first = await tay.schedule("demo.add.v1", cron="0 9 * * 1-5", timezone="+02",
                                   kwargs={"left": 1, "right": 2}, declaration_id="nightly")
        again = await tay.schedule("demo.add.v1", cron="0 9 * * 1-5", timezone="+02",
                                   kwargs={"left": 1, "right": 2}, declaration_id="nightly")
        generated = await tay.schedule("demo.add.v1", cron="*/5 * * * *")
        refused = []
        for cron in ("61 * * * *", "0 0 30 2 *", "* * * *"):
            try:
                await tay.schedule("demo.add.v1", cron=cron)
                refused.append(None)
            except ServerError as error:
                refused.append(error.code)
        cancelled = await first.cancel()
        await generated.cancel()
        return [first.id, again.id, len(generated.id), refused, cancelled]
    """)
    first, again, generated_length, refused, cancelled = result
    assert first == again == "nightly" and generated_length == 24
    assert refused == ["invalid_schedule"] * 3
    assert cancelled["cancelled_at"] is not None and cancelled["kind"] == "cron"
    assert cancelled["cron"] == "0 9 * * 1-5" and cancelled["timezone"] == "+02"
    assert cancelled["overlap"] == "skip" and cancelled["catch_up"] == "latest"
    assert cancelled["next_at"] is None and cancelled["revision"] == 1


def test_a_schedule_survives_an_engine_restart_and_fires_after_it() -> None:
    server = Server().start()
    try:
        declared = server.client("""
            import time
            start = time.time_ns() // 1_000_000 + 2_000
            handle = await tay.every("demo.sleep.v1", minutes=60, start_at=start,
                                     kwargs={"seconds": 0, "key": "after-restart"},
                                     declaration_id="durable-every")
            return handle.id
        """)
        assert declared == "durable-every"
        server.stop()  # before the first occurrence is due; the client is gone too
        server.start()
        server.start_worker(capacity=1)
        assert wait_for_lines(server.root / "after-restart", 1) == 1
        cancelled = server.client("""
            handle = await tay.every("demo.sleep.v1", minutes=60, start_at=0,
                                     kwargs={"seconds": 0, "key": "after-restart"},
                                     declaration_id="durable-every")
            return await handle.cancel()
        """)
        # Redeclaring with another start_at is idempotent: delay/start_at are not identity.
        assert cancelled["revision"] == 1 and cancelled["last_at"] is not None
    finally:
        server.close()
