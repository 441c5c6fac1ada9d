"""Screenshots of the dashboard for docs/dashboard.md: ``make dashboard-screenshots``.

Runs a real ``tay serve`` and SDK worker (the browser tests' setup), produces a few
minutes of varied activity (so the throughput chart has a shape), then has Chromium take
full-page PNGs of the overview and of a failed job's detail page.

    .venv/bin/python -m tests.dashboard.screenshots docs/images [--minutes 4]
"""

from __future__ import annotations

import argparse
import os
import random
import time

from tests.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.dashboard.engine import started_engine


def produce_activity(engine, minutes: int) -> str:
    """Waves of work once a minute; returns the id of a failed payment job."""
    rng = random.Random(7)
    gate = os.path.join(engine.scratch, "payments-gate-never-created")

    async def declare(tay):
        await tay.every("ui.ok", minutes=5, kwargs={"n": 7}, declaration_id="digest-every-5m")
        await tay.schedule("ui.ok", cron="0 3 * * *", kwargs={"n": 1},
                           declaration_id="nightly-report")
    engine.produce(declare)
    engine.admin.call("pause_queue", {"queue": "reports"})
    for n in range(6):
        engine.enqueue("ui.ok", {"n": n}, queue="reports")
    failed = ""
    for wave in range(minutes):
        for n in range(rng.randint(30, 110)):
            engine.enqueue("ui.ok", {"n": n}, queue=rng.choice(("emails", "emails", "thumbnails")))
        for n in range(rng.randint(0, 4)):
            failed = engine.enqueue("ui.flaky", {"gate": gate, "note": f"A-{4100 + wave * 10 + n}",
                                                 "amount_cents": rng.randint(500, 90_000)},
                                    queue="payments")
        if wave < minutes - 1:
            time.sleep(60 - time.time() % 60 + 1)
    if not failed:
        failed = engine.enqueue("ui.flaky", {"gate": gate, "note": "A-4242",
                                             "amount_cents": 12_900}, queue="payments")
    for _ in range(3):
        engine.enqueue("ui.slow", {"seconds": 60}, queue="exports")
    engine.wait_state(failed, "discarded")
    time.sleep(1.0)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="where the PNG files go")
    parser.add_argument("--minutes", type=int, default=4, help="minutes of activity (4)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    os.makedirs(args.folder, exist_ok=True)
    with started_engine() as engine:
        failed = produce_activity(engine, max(args.minutes, 1))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, path in (("overview", "/ui/"), ("job", f"/ui/jobs/{failed}")):
                page.goto(engine.url + path)
                target = os.path.join(args.folder, f"dashboard-{name}.png")
                page.screenshot(path=target, full_page=True)
                print("wrote", target)
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
