"""The dashboard in a real browser (Debian's Chromium through Playwright) against a real
``tay serve`` and a real SDK worker process: live refresh, failures and retries, retry all
and cancel all, queue control (pause, scale, purge with confirmation), the queue-latency
and per-queue throughput charts, what workers run, a quiet worker, what each task did,
the day history,
running, pausing, resuming and cancelling a schedule, compact now, CSRF from another
origin, and the whole thing with JavaScript turned off."""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api", reason="BROWSER TESTS NOT RUN: the "
                             "playwright package is missing").expect
expect.set_options(timeout=10_000)  # live refresh runs every 2-3 s


@pytest.fixture
def watched(page):
    """The page, failing the test on a script error or a Content-Security-Policy violation."""
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: problems.append(message.text)
            if "Content Security Policy" in message.text else None)
    yield page
    assert problems == []


def row(page, text: str):
    return page.locator("tbody tr", has_text=text)


def test_enqueued_jobs_appear_without_a_reload(watched, ui_engine):
    watched.goto("/ui/jobs?queue=ui-live")
    expect(watched.get_by_text("No jobs match these filters")).to_be_visible()
    watched.evaluate("window.__sameDocument = true")
    ids = [ui_engine.enqueue("ui.ok", {"n": n}, queue="ui-live") for n in range(3)]
    for job_id in ids:
        expect(watched.locator(f'a[href="/ui/jobs/{job_id}"]')).to_be_visible()
    expect(row(watched, ids[0][:12]).locator(".badge")).to_have_text("completed")
    assert watched.evaluate("window.__sameDocument") is True  # htmx swapped, no reload


def test_a_failed_job_shows_its_traceback_and_a_retry_completes_it(watched, ui_engine):
    gate = os.path.join(ui_engine.scratch, f"gate-{uuid.uuid4().hex}")
    job_id = ui_engine.enqueue("ui.flaky", {"gate": gate, "note": "A-42"}, queue="ui-pay")
    watched.goto("/ui/")
    failures = watched.locator("section", has=watched.get_by_role("heading",
                                                                     name="Recent failures"))
    failures.get_by_role("link", name=job_id[:12]).click()
    expect(watched).to_have_url(re.compile(f"/ui/jobs/{job_id}$"))
    expect(watched.locator("h1 .badge")).to_have_text("discarded")
    expect(watched.locator(".error-type").first).to_have_text("PaymentDeclined")
    traceback = watched.get_by_label("Traceback")
    expect(traceback).to_contain_text("raise PaymentDeclined")
    expect(traceback).to_contain_text("card declined for order A-42")
    open(gate, "w").close()
    watched.get_by_role("button", name="Retry").click()
    expect(watched.get_by_role("status")).to_contain_text("Retry requested")
    expect(watched.locator("h1 .badge")).to_have_text("completed")  # by live refresh
    expect(watched.get_by_role("region", name="Result").locator("pre")).to_have_text('"paid"')
    expect(watched.locator(".timeline li")).to_have_count(2)


def test_retry_all_retries_every_discarded_job_of_a_queue_after_a_confirmation(watched,
                                                                                 ui_engine):
    gate = os.path.join(ui_engine.scratch, f"gate-{uuid.uuid4().hex}")
    queue = "ui-bulk"
    failed = [ui_engine.enqueue("ui.flaky", {"gate": gate, "note": f"B-{n}"}, queue=queue)
              for n in range(3)]
    other = ui_engine.enqueue("ui.flaky", {"gate": gate, "note": "C-1"}, queue="ui-bulk-other")
    for job_id in failed + [other]:
        ui_engine.wait_state(job_id, "discarded")
    watched.goto(f"/ui/jobs?state=discarded&queue={queue}")
    watched.get_by_role("link", name=f"Retry all discarded of {queue}…").click()
    expect(watched.get_by_role("heading", level=1)).to_contain_text(
        f"Retry every discarded job of {queue}?")
    expect(watched.locator(".confirm")).to_contain_text("3 jobs are discarded now")
    open(gate, "w").close()  # the cause is fixed: the retries succeed
    watched.get_by_role("button", name="Retry 3 discarded jobs").click()
    expect(watched.get_by_role("status")).to_contain_text("Retried 3 job(s).")
    expect(watched).to_have_url(re.compile(r"/ui/jobs\?state=discarded&queue=ui-bulk&done="))
    for job_id in failed:
        ui_engine.wait_state(job_id, "completed")
    assert ui_engine.job(other)["state"] == "discarded"  # another queue's are left alone
    expect(watched.get_by_text("No jobs match these filters")).to_be_visible()
    expect(watched.get_by_role("link", name=re.compile("^Retry all"))).to_have_count(0)


def test_cancel_all_cancels_the_available_jobs_of_a_task_after_a_confirmation(watched,
                                                                             ui_engine):
    queue = "ui-cancel-all"
    ui_engine.admin.call("pause_queue", {"queue": queue})
    doomed = [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in range(3)]
    kept = ui_engine.enqueue("ui.ok", {"n": 9}, queue="ui-cancel-all-other")
    watched.goto(f"/ui/jobs?state=available&queue={queue}")
    watched.get_by_role("link", name=f"Cancel all available of {queue}…").click()
    expect(watched.get_by_role("heading", level=1)).to_contain_text(
        f"Cancel every available job of {queue}?")
    expect(watched.locator(".confirm")).to_contain_text("3 jobs are available now")
    watched.get_by_role("button", name="Cancel 3 available jobs").click()
    expect(watched.get_by_role("status")).to_contain_text("Cancelled 3 job(s).")
    assert {ui_engine.job(job_id)["state"] for job_id in doomed} == {"cancelled"}
    ui_engine.wait_state(kept, "completed")  # another queue's are left alone
    expect(watched.get_by_role("link", name=re.compile("^Cancel all"))).to_have_count(0)
    ui_engine.admin.call("resume_queue", {"queue": queue})


def test_pausing_a_queue_stops_dispatch_until_it_is_resumed(watched, ui_engine):
    queue = "ui-steer"
    ui_engine.wait_state(ui_engine.enqueue("ui.ok", {"n": 1}, queue=queue), "completed")
    watched.goto("/ui/queues")
    row(watched, queue).get_by_role("button", name="Pause").click()
    expect(watched.get_by_role("status")).to_contain_text("Queue paused")
    expect(row(watched, queue).locator(".badge")).to_have_text("paused")
    held = [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in (2, 3)]
    expect(row(watched, queue).locator("td").nth(2)).to_have_text("2")  # waiting, live
    time.sleep(0.3)
    assert [ui_engine.job(job_id)["state"] for job_id in held] == ["available"] * 2
    latency = row(watched, queue).locator("td").nth(3)  # the oldest has waited since enqueued
    expect(latency).to_have_text(re.compile(r"^\d+ ms$|^\d+\.\d s$"))
    row(watched, queue).get_by_role("button", name="Resume").click()
    expect(watched.get_by_role("status")).to_contain_text("Queue resumed")
    for job_id in held:
        ui_engine.wait_state(job_id, "completed")
    expect(row(watched, queue).get_by_label(f"3 completed in {queue}")).to_be_visible()
    expect(latency).to_have_text("–")  # none is ready


def test_the_overview_charts_how_long_a_held_queue_has_waited(watched, ui_engine):
    queue = "ui-latency"
    ui_engine.admin.call("pause_queue", {"queue": queue})
    job_id = ui_engine.enqueue("ui.ok", {"n": 1}, queue=queue)
    time.sleep(1.5)
    watched.goto("/ui/")
    panel = watched.locator("section", has=watched.get_by_role(
        "heading", name="Queue latency, last hour", exact=True))
    entry = panel.locator(".legend li", has_text=queue)
    expect(entry).to_contain_text(re.compile(r"peak \d+\.\d s"))
    place = entry.evaluate("e => [...e.parentNode.children].indexOf(e)")  # its colour
    line = panel.locator(f"svg polyline.q{place}")
    points = line.get_attribute("points").split()
    assert len(points) == 60 and float(points[-1].split(",")[1]) < float(points[0].split(",")[1])
    expect(panel.locator("svg desc")).to_contain_text(f"{queue} peaked at")
    ui_engine.admin.call("resume_queue", {"queue": queue})
    ui_engine.wait_state(job_id, "completed")


def test_the_queues_page_charts_what_each_queue_completed(watched, ui_engine):
    queue = "ui-throughput"  # more than any other test's queue: among the 8 charted
    for job_id in [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in range(30)]:
        ui_engine.wait_state(job_id, "completed")
    watched.goto("/ui/queues")
    panel = watched.locator("section", has=watched.get_by_role(
        "heading", name="Completed per queue, last hour", exact=True))
    entry = panel.locator(".legend li", has_text=queue)
    expect(entry).to_contain_text("30 completed")
    place = entry.evaluate("e => [...e.parentNode.children].indexOf(e)")  # its colour
    heights = [float(point.split(",")[1]) for point in
               panel.locator(f"svg polyline.q{place}").get_attribute("points").split()]
    # the jobs count in the minute of the sample that saw them: this one or the one before
    assert len(heights) == 60 and min(heights[-2:]) < heights[0]
    expect(panel.locator("svg desc")).to_contain_text(f"{queue}: 30 completed, 0 failed")


def test_the_tasks_page_shows_each_task_s_outcomes_and_run_times(watched, ui_engine):
    queue = "ui-tasks"
    for job_id in [ui_engine.enqueue("ui.slow", {"seconds": 0.3}, queue=queue)
                   for _ in range(2)]:
        ui_engine.wait_state(job_id, "completed")
    watched.goto("/ui/")
    watched.get_by_role("navigation", name="Sections").get_by_role(
        "link", name="Tasks", exact=True).click()
    expect(watched).to_have_url(re.compile(r"/ui/tasks$"))
    line = watched.locator("tbody tr", has=watched.locator(
        f'a[href="/ui/jobs?queue={queue}"]'))
    cells = line.locator("td")
    expect(cells.nth(2)).to_have_text("2")  # completed
    expect(cells.nth(6)).to_have_text(re.compile(r"^3\d\d ms$"))  # the mean run
    expect(cells.nth(7)).to_have_text("≤ 500 ms")  # p50: a 0.3 s run's bucket
    expect(line.get_by_role("link", name="ui.slow")).to_have_attribute(
        "href", f"/ui/jobs?task=ui.slow&queue={queue}")
    watched.get_by_role("navigation", name="Counted over").get_by_role(
        "link", name="Last hour").click()
    expect(watched).to_have_url(re.compile(r"/ui/tasks\?window=hour$"))
    expect(watched.get_by_role("link", name="Last hour")).to_have_attribute(
        "aria-current", "true")
    expect(cells.nth(2)).to_have_text("2")  # both ran within the hour
    expect(watched.locator(".muted").last).to_contain_text("In the last hour")


def test_the_history_page_charts_and_lists_each_day(watched, ui_engine):
    for job_id in [ui_engine.enqueue("ui.ok", {"n": n}, queue="ui-history") for n in range(2)]:
        ui_engine.wait_state(job_id, "completed")
    today = ui_engine.admin.call("history", {"days": 1})["days"][-1]
    assert today["completed"] >= 2 and today["enqueued"] >= 2
    watched.goto("/ui/")
    watched.get_by_role("navigation", name="Sections").get_by_role(
        "link", name="History", exact=True).click()
    expect(watched).to_have_url(re.compile(r"/ui/history$"))
    expect(watched.get_by_role("link", name="30 days")).to_have_attribute("aria-current", "true")
    expect(watched.get_by_role("img", name="Jobs a day over the last 30 days")).to_be_visible()
    days = watched.locator("table.history tbody tr")
    expect(days).to_have_count(30)
    first = days.first  # today, newest first
    expect(first.locator("th")).to_contain_text("today")
    expect(first.locator("td").nth(0)).to_have_text(f"{today['enqueued']:,}")
    expect(first.locator("td").nth(1)).to_have_text(f"{today['completed']:,}")
    watched.get_by_role("navigation", name="Days shown").get_by_role(
        "link", name="7 days").click()
    expect(watched).to_have_url(re.compile(r"/ui/history\?days=7$"))
    expect(days).to_have_count(7)
    expect(watched.get_by_role("link", name="7 days")).to_have_attribute("aria-current", "true")


def test_the_workers_page_shows_what_runs_now(watched, ui_engine):
    job_id = ui_engine.enqueue("ui.slow", {"seconds": 4}, queue="ui-busy")
    ui_engine.wait_state(job_id, "executing")
    watched.goto("/ui/workers")
    running = watched.locator("section", has=watched.get_by_role("heading",
                                                                 name=re.compile("^Running now")))
    line = running.locator("tbody tr", has=watched.locator(f'a[href="/ui/jobs/{job_id}"]'))
    expect(line).to_contain_text("ui.slow")
    expect(line).to_contain_text("ui-busy")
    expect(line.locator("td").nth(6)).to_have_text(re.compile(r"^\d+ ms$|^\d\.\d s$"))
    ui_engine.wait_state(job_id, "completed")
    expect(line).to_have_count(0)  # by live refresh


def test_a_quiet_worker_takes_nothing_new_until_it_is_unquieted(watched, ui_engine):
    (runtime,) = [w["runtime_id"] for w in ui_engine.admin.call("workers", {})["workers"]
                  if "ui.ok" in w["tasks"]]
    watched.goto("/ui/workers")
    line = row(watched, runtime)
    try:
        line.get_by_role("button", name="Quiet", exact=True).click()
        expect(watched.get_by_role("status")).to_contain_text("Worker quiet")
        expect(line.locator(".badge")).to_have_text("quiet")
        job_id = ui_engine.enqueue("ui.ok", {"n": 7}, queue="ui-quiet")
        expect(watched.locator(".banner.warn")).to_contain_text("ui.ok")  # nobody serves it
        assert ui_engine.job(job_id)["state"] == "available"
        line.get_by_role("button", name="Unquiet", exact=True).click()
        expect(watched.get_by_role("status")).to_contain_text("Worker offered jobs again")
        expect(line.locator(".badge")).to_have_text("active")
        ui_engine.wait_state(job_id, "completed")
    finally:  # the other tests share this worker
        ui_engine.admin.call("unquiet_worker", {"runtime_id": runtime})


def test_scaling_a_queue_sets_its_credits_and_goes_back_to_the_configured_ones(watched,
                                                                                ui_engine):
    queue = "ui-scale"
    ui_engine.wait_state(ui_engine.enqueue("ui.ok", {"n": 1}, queue=queue), "completed")
    watched.goto("/ui/queues")
    row(watched, queue).get_by_role("link", name="Scale…", exact=True).click()
    expect(watched.get_by_role("heading", level=1)).to_contain_text("Scale queue")
    expect(watched.locator(".settings")).to_contain_text("(its configured credits)")
    watched.get_by_label("Credits").fill("3")
    watched.get_by_role("button", name="Set credits").click()
    expect(watched.get_by_role("status")).to_contain_text("it runs up to 3 job(s) at once")
    credits = row(watched, queue).locator("td").nth(1)
    expect(credits).to_have_text(re.compile(r"^0 / 3\s+scaled$"))
    assert ui_engine.admin.call("status", {})["engine"]["scaled_queues"][queue] == 3
    row(watched, queue).get_by_role("link", name="Scale…", exact=True).click()
    expect(watched.locator(".settings")).to_contain_text("its configured credits are 10")
    watched.get_by_label("Credits").fill("0")  # the browser's own check keeps it unsent
    watched.get_by_role("button", name="Set credits").click()
    expect(watched.get_by_role("heading", level=1)).to_contain_text("Scale queue")
    watched.get_by_role("button", name="Back to the configured credits").click()
    expect(watched.get_by_role("status")).to_contain_text("it runs up to 10 job(s) at once")
    expect(credits).to_have_text("0 / 10")
    assert queue not in ui_engine.admin.call("status", {})["engine"]["scaled_queues"]


def test_purge_asks_for_confirmation_then_cancels_waiting_jobs(watched, ui_engine):
    queue = "ui-purge"
    ui_engine.admin.call("pause_queue", {"queue": queue})
    ids = [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in range(3)]
    watched.goto("/ui/queues")
    row(watched, queue).get_by_role("link", name="Purge…").click()
    expect(watched.get_by_role("heading", level=1)).to_contain_text("Purge queue")
    expect(watched.locator(".confirm")).to_contain_text("3 jobs wait now")
    assert {ui_engine.job(job_id)["state"] for job_id in ids} == {"available"}
    watched.get_by_role("button", name="Cancel 3 waiting jobs").click()
    expect(watched.get_by_role("status")).to_contain_text("Purged 3 waiting job(s); 0 still")
    assert {ui_engine.job(job_id)["state"] for job_id in ids} == {"cancelled"}
    ui_engine.admin.call("resume_queue", {"queue": queue})


def test_running_a_schedule_now_pausing_resuming_then_cancelling_it(watched, ui_engine):
    async def declare(tay):
        await tay.every("ui.ok", minutes=1, kwargs={"n": 5}, declaration_id="ui-every-minute")
    ui_engine.produce(declare)
    watched.goto("/ui/schedules/ui-every-minute")
    watched.get_by_role("button", name="Run now").click()
    expect(watched).to_have_url(re.compile(r"/ui/jobs/[0-9a-f]{32}\?done=schedule_run$"))
    expect(watched.get_by_role("status")).to_contain_text("Enqueued now from its schedule")
    expect(watched.locator("h1 .badge")).to_have_text("completed")  # by live refresh
    job_id = watched.url.split("/ui/jobs/")[1].split("?")[0]
    assert ui_engine.job(job_id)["task"] == "ui.ok"
    watched.goto("/ui/schedules")
    line = row(watched, "ui-every-minute")
    expect(line).to_contain_text("every 1 min")
    expect(line.locator("ul.times li")).to_have_count(3)
    line.get_by_role("button", name="Pause", exact=True).click()
    expect(watched).to_have_url(re.compile(r"/ui/schedules/ui-every-minute\?done=schedule_paused"))
    expect(watched.get_by_role("status")).to_contain_text("Schedule paused")
    expect(watched.locator("h1 .badge")).to_have_text("paused")
    assert ui_engine.admin.call("schedule", {"schedule_id": "ui-every-minute"})[
        "schedule"]["paused"] is True
    watched.goto("/ui/schedules")
    expect(row(watched, "ui-every-minute").locator(".badge.paused")).to_have_text("paused")
    watched.goto("/ui/schedules/ui-every-minute")
    watched.get_by_role("button", name="Resume", exact=True).click()
    expect(watched.get_by_role("status")).to_contain_text("Schedule resumed")
    expect(watched.locator("h1 .badge")).to_have_text("active")
    watched.goto("/ui/schedules")
    line = row(watched, "ui-every-minute")
    line.get_by_role("button", name="Cancel").click()
    expect(watched).to_have_url(re.compile(r"/ui/schedules/ui-every-minute\?done="))
    expect(watched.get_by_role("status")).to_contain_text("Schedule cancelled")
    expect(watched.locator("h1 .badge")).to_have_text("cancelled")
    assert ui_engine.admin.call("schedule", {"schedule_id": "ui-every-minute"})[
        "schedule"]["cancelled_at"] is not None


def test_compact_now_publishes_a_new_epoch_and_shows_what_it_did(watched, ui_engine):
    job_id = ui_engine.enqueue("ui.ok", {"n": 7}, queue="ui-compact")
    ui_engine.wait_state(job_id, "completed")
    before = ui_engine.admin.call("status", {})["storage"]["epoch"]
    watched.goto("/ui/storage")
    watched.get_by_role("button", name="Compact now").click()
    expect(watched.get_by_role("status")).to_contain_text("Compaction finished.")
    after = ui_engine.admin.call("status", {})["storage"]["epoch"]
    assert after is not None and after != before  # an online compaction published an epoch
    facts = watched.locator("section", has=watched.get_by_role("heading", name="Compaction",
                                                                exact=True))
    expect(facts.locator("dd.mono")).to_have_text(str(after))
    expect(facts).to_contain_text("kept")
    # what the server process and the compaction's process use
    status = ui_engine.admin.call("status", {})
    server = watched.locator("section", has=watched.get_by_role("heading",
                                                                 name="Server process"))
    expect(server.locator("dd.mono")).to_have_text(str(status["process"]["pid"]))
    expect(server).to_contain_text("resident")
    used = status["storage"]["last_compaction"]["process"]
    process = watched.locator("section", has=watched.get_by_role("heading",
                                                                  name="Compaction process"))
    expect(process).to_contain_text(f"Not running. The last one (PID {used['pid']}) used:")
    expect(process).to_contain_text("and its check")
    assert ui_engine.job(job_id)["state"] == "completed"  # retained through the switch


def test_a_form_on_another_origin_cannot_act(watched, ui_engine):
    token = ui_engine.get("/ui/queues").csrf()  # even a leaked token does not help
    target = f"{ui_engine.url}/ui/queues/ui-forged/pause"
    forged = (f'<form method="post" action="{target}"><input type="hidden" name="csrf" '
              f'value="{token}"><button>Win a prize</button></form>')
    watched.route("http://attacker.test/**", lambda route: route.fulfill(
        body=forged, content_type="text/html"))
    watched.goto("http://attacker.test/")
    with watched.expect_response(target) as answer:
        watched.get_by_role("button", name="Win a prize").click()
    assert answer.value.status == 403
    expect(watched.get_by_role("alert")).to_contain_text("cross-site request refused")
    assert "ui-forged" not in ui_engine.admin.call("status", {})["engine"]["paused_queues"]


def test_everything_reads_and_acts_without_javascript(browser, ui_engine):
    job_id = ui_engine.enqueue("ui.ok", {"n": 12}, queue="ui-nojs")
    ui_engine.wait_state(job_id, "completed")
    context = browser.new_context(base_url=ui_engine.url, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/ui/jobs")
        page.get_by_label("State", exact=True).select_option("completed")
        page.get_by_label("Queue", exact=True).fill("ui-nojs")
        page.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(re.compile(r"state=completed&queue=ui-nojs"))
        page.get_by_label("Job ID").fill(job_id)
        page.get_by_role("button", name="Open").click()
        expect(page.get_by_role("region", name="Arguments").locator("pre")).to_contain_text('"n": 12')
        page.goto("/ui/queues")
        row(page, "ui-nojs").get_by_role("button", name="Pause").click()
        expect(page.get_by_role("status")).to_contain_text("Queue paused")
        row(page, "ui-nojs").get_by_role("button", name="Resume").click()
        expect(page.get_by_role("status")).to_contain_text("Queue resumed")
    finally:
        context.close()
