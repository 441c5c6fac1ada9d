"""The dashboard over plain HTTP against a real ``tay serve`` with a real worker: pages read
without JavaScript, untrusted text renders inert, actions need a valid CSRF token from a
same-origin page, and the response headers keep pages fresh and framed."""

from __future__ import annotations

import html
import os
import re

import pytest
from markupsafe import escape

from tay.dashboard.csrf import CsrfGuard

pytestmark = pytest.mark.slow

XSS_ARG = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
XSS_QUEUE = 'q"><svg onload=alert(1)>'


def rows(text: str) -> list[str]:
    return re.findall(r'href="/ui/jobs/([0-9a-f]{32})"', text)


def test_pages_read_without_javascript(ui_engine):
    job_id = ui_engine.enqueue("ui.ok", {"n": 6}, queue="nojs")
    ui_engine.wait_state(job_id, "completed")
    listing = ui_engine.get("/ui/jobs?queue=nojs")
    assert listing.status == 200 and rows(listing.text) == [job_id]
    assert "ui.ok" in listing.text and "completed" in listing.text
    detail = ui_engine.get(f"/ui/jobs/{job_id}")
    assert detail.status == 200
    assert "&#34;square&#34;: 36" in detail.text or '"square": 36' in html.unescape(detail.text)
    overview = ui_engine.get("/ui/")
    assert overview.status == 200 and "Throughput per minute" in overview.text
    assert "<dt>Completed today</dt>" in overview.text
    assert "<svg" in overview.text and "nojs" in overview.text
    assert "<dt>Event loop</dt><dd>no stall over 500 ms</dd>" in overview.text
    for path in ("/ui/queues", "/ui/schedules", "/ui/workers", "/ui/tasks", "/ui/storage",
                 "/ui/history", "/ui/history?days=180", "/ui/history?days=x"):
        page = ui_engine.get(path)
        assert page.status == 200, (path, page.text[:500])
    assert "ui.flaky" in ui_engine.get("/ui/workers").text  # the worker's registered tasks


def test_headers_keep_pages_fresh_and_unframed(ui_engine):
    page = ui_engine.get("/ui/")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert re.fullmatch(r"admin;dur=[0-9.]+, render;dur=[0-9.]+", page.headers["server-timing"])
    css_url = re.search(r'href="(/ui/static/tay\.css\?v=[0-9a-f]+)"', page.text).group(1)
    css = ui_engine.get(css_url)
    assert css.status == 200 and "immutable" in css.headers["cache-control"]
    assert css.headers["content-type"].startswith("text/css")
    htmx = ui_engine.get("/ui/static/htmx.min.js")
    assert htmx.status == 200 and htmx.headers["cache-control"] == "no-cache"
    assert htmx.body.startswith(b"var htmx=function()")
    assert ui_engine.get("/ui").status == 303
    assert ui_engine.get("/ui/static/../../etc/passwd").status == 404
    missing = ui_engine.get("/ui/nope")
    assert missing.status == 404 and "no such dashboard page" in missing.text
    wrong = ui_engine.request("POST", "/ui/jobs", b"", {})
    assert wrong.status == 405 and wrong.headers["allow"] == "GET"
    assert ui_engine.request("HEAD", "/ui/queues").status == 200
    assert ui_engine.get("/admin/status").headers["content-type"] == "application/json"


def test_untrusted_args_traceback_and_names_render_inert(ui_engine):
    gate = os.path.join(ui_engine.scratch, "never-created")
    job_id = ui_engine.enqueue("ui.flaky", {"gate": gate, "note": XSS_ARG}, queue=XSS_QUEUE)
    job = ui_engine.wait_state(job_id, "discarded")
    assert XSS_ARG in job["failure"]["traceback"] and XSS_ARG in job["failure"]["message"]
    pages = [ui_engine.get(f"/ui/jobs/{job_id}"), ui_engine.get("/ui/"),
             ui_engine.get("/ui/queues"), ui_engine.get("/ui/jobs?state=discarded")]
    for page in pages:
        assert page.status == 200
        for raw in ("<script>window.__xss", "<img src=x", "<svg onload"):
            assert raw not in page.text
    detail = pages[0].text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in detail  # shown, as text
    assert "card declined for order &lt;script&gt;" in detail
    assert str(escape(XSS_QUEUE)) in pages[2].text  # &#34; for the quote
    assert "q%22%3E%3Csvg%20onload%3Dalert%281%29%3E" in pages[2].text  # in URLs, encoded


def test_retry_all_takes_a_retriable_state_only(ui_engine):
    for query in ("", "?state=completed", "?state=executing&queue=q"):
        page = ui_engine.get(f"/ui/retry{query}")
        assert page.status == 400, query
        assert "retry all takes state=retryable, discarded, cancelled or scheduled" in page.text
    token = ui_engine.get("/ui/queues").csrf()
    refused = ui_engine.post("/ui/retry?state=completed", {"csrf": token})
    assert refused.status == 400
    confirm = ui_engine.get("/ui/retry?state=cancelled&queue=never-used")
    assert confirm.status == 200 and "0 jobs are cancelled now" in confirm.text
    done = ui_engine.post("/ui/retry?state=cancelled&queue=never-used", {"csrf": token})
    assert done.status == 303
    assert done.headers["location"] == ("/ui/jobs?state=cancelled&queue=never-used&"
                                        "done=retried_all&n=0")


def test_run_now_starts_a_scheduled_job_before_its_time(ui_engine):
    """A scheduled job's page offers Run now, not Retry; the action runs it now and its
    run-all confirmation says what happens."""
    job_id = ui_engine.enqueue("ui.ok", {"n": 2}, queue="run-now", delay=3600)
    page = ui_engine.get(f"/ui/jobs/{job_id}")
    assert "Run now</button>" in page.text and "Retry</button>" not in page.text
    confirm = ui_engine.get("/ui/retry?state=scheduled&queue=run-now")
    assert confirm.status == 200
    assert "Run every scheduled job of <code>run-now</code> now?" in confirm.text
    assert "instead of at their scheduled time" in confirm.text
    assert "Run 1 scheduled jobs now</button>" in confirm.text
    done = ui_engine.post(f"/ui/jobs/{job_id}/retry", {"csrf": page.csrf()})
    assert done.status == 303
    ui_engine.wait_state(job_id, "completed")
    assert ui_engine.job(job_id)["attempts"][0]["outcome"] == "completed"


def test_jobs_filtered_by_args_and_cancelled_together(ui_engine):
    """The Args hold filter lists the jobs whose args hold the object; Cancel all takes the
    same filter through its confirmation; text that is not a JSON object is a 400 banner."""
    from urllib.parse import quote

    queue = "by-args"  # nobody runs nobody.args: its jobs stay available
    of_42 = [ui_engine.enqueue("nobody.args", {"account": 42, "n": n}, queue=queue)
             for n in range(2)]
    of_7 = ui_engine.enqueue("nobody.args", {"account": 7}, queue=queue)
    wanted = quote('{"account": 42}')
    listing = ui_engine.get(f"/ui/jobs?queue={queue}&state=available&args={wanted}")
    assert listing.status == 200 and sorted(rows(listing.text)) == sorted(of_42)
    assert 'value="{&#34;account&#34;: 42}"' in listing.text  # the filter is kept, inert
    assert "Cancel all available of by-args with args {&#34;account&#34;: 42}…" in listing.text
    query = f"state=available&queue={queue}&args={wanted}"
    confirm = ui_engine.get(f"/ui/cancel?{query}")
    assert confirm.status == 200
    assert "with args holding <code>{&#34;account&#34;: 42}</code>" in confirm.text
    done = ui_engine.post(f"/ui/cancel?{query}", {"csrf": confirm.csrf()})
    assert done.status == 303 and "done=cancelled_all&n=2" in done.headers["location"]
    assert {ui_engine.job(job_id)["state"] for job_id in of_42} == {"cancelled"}
    assert ui_engine.job(of_7)["state"] == "available"
    bad = ui_engine.get(f"/ui/jobs?args={quote('[42]')}")
    assert bad.status == 400 and "args must be a JSON object" in bad.text
    ui_engine.admin.call("cancel_job", {"job_id": of_7})  # nothing left waiting


def test_jobs_filtered_by_their_last_failure(ui_engine):
    """Error has finds the jobs whose last failure's type or message holds the text, in
    any case; the Retry all link and its confirmation carry the filter."""
    from urllib.parse import quote

    queue = "by-error"
    failed = ui_engine.enqueue("ui.flaky", {"gate": "/nonexistent", "note": "A-17"},
                               queue=queue)
    ui_engine.wait_state(failed, "discarded")
    ok = ui_engine.enqueue("ui.ok", {"n": 1}, queue=queue)
    ui_engine.wait_state(ok, "completed")
    listing = ui_engine.get(f"/ui/jobs?queue={queue}&error={quote('card DECLINED')}")
    assert listing.status == 200 and rows(listing.text) == [failed]
    assert rows(ui_engine.get(f"/ui/jobs?queue={queue}&error=paymentdeclined").text) == [failed]
    assert rows(ui_engine.get(f"/ui/jobs?queue={queue}&error=KeyError").text) == []
    shown = ui_engine.get(f"/ui/jobs?state=discarded&queue={queue}&error=declined")
    assert "Retry all discarded of by-error failed with “declined”…" in shown.text
    confirm = ui_engine.get(f"/ui/retry?state=discarded&queue={queue}&error=declined")
    assert "whose last failure has “declined”" in confirm.text
    too_long = ui_engine.get(f"/ui/jobs?error={'x' * 201}")
    assert too_long.status == 400 and "error must be a text of 1..200" in too_long.text


def test_a_finished_job_is_deleted_after_a_confirmation(ui_engine):
    """Delete… on a completed job's page leads to a confirmation; its POST deletes the job
    and lands on the jobs page with a notice; Delete all completed of a queue does the rest
    of it; a waiting job's confirmation page says it must be cancelled first."""
    queue = "deleting"
    ids = [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in range(3)]
    for job_id in ids:
        ui_engine.wait_state(job_id, "completed")
    page = ui_engine.get(f"/ui/jobs/{ids[0]}")
    assert f'href="/ui/jobs/{ids[0]}/delete">Delete…</a>' in page.text
    confirm = ui_engine.get(f"/ui/jobs/{ids[0]}/delete")
    assert confirm.status == 200 and "This removes the job from the engine" in confirm.text
    done = ui_engine.post(f"/ui/jobs/{ids[0]}/delete", {"csrf": confirm.csrf()})
    assert done.status == 303
    assert done.headers["location"] == f"/ui/jobs?done=deleted&id={ids[0]}"
    landed = ui_engine.get(done.headers["location"])
    assert f"Deleted job {ids[0]}: its id is free again." in landed.text
    assert ui_engine.get(f"/ui/jobs/{ids[0]}").status == 404
    listing = ui_engine.get(f"/ui/jobs?state=completed&queue={queue}")
    assert "Delete all completed of deleting…" in listing.text
    bulk = ui_engine.get(f"/ui/delete?state=completed&queue={queue}")
    assert "Delete every completed job of <code>deleting</code>?" in bulk.text
    assert "2 jobs are completed now." in bulk.text
    gone = ui_engine.post(f"/ui/delete?state=completed&queue={queue}", {"csrf": bulk.csrf()})
    assert gone.headers["location"] == (f"/ui/jobs?state=completed&queue={queue}&"
                                        "done=deleted_all&n=2")
    assert rows(ui_engine.get(f"/ui/jobs?queue={queue}").text) == []
    waiting = ui_engine.enqueue("nobody.delete", {}, queue=queue)
    held = ui_engine.get(f"/ui/jobs/{waiting}/delete")
    assert "Only a finished job can be deleted" in held.text and "Delete the job" not in held.text
    assert ui_engine.post(f"/ui/jobs/{waiting}/delete", {"csrf": bulk.csrf()}).status == 409
    ui_engine.admin.call("cancel_job", {"job_id": waiting})


def test_cancel_all_takes_a_cancellable_state_only(ui_engine):
    for query in ("", "?state=completed", "?state=cancelled&queue=q"):
        page = ui_engine.get(f"/ui/cancel{query}")
        assert page.status == 400, query
        assert ("cancel all takes state=scheduled, available, retryable or executing"
                in page.text)
    token = ui_engine.get("/ui/queues").csrf()
    assert ui_engine.post("/ui/cancel?state=discarded", {"csrf": token}).status == 400
    confirm = ui_engine.get("/ui/cancel?state=executing&queue=never-used")
    assert confirm.status == 200 and "0 jobs are executing now" in confirm.text
    assert "its worker is told to stop it" in confirm.text
    done = ui_engine.post("/ui/cancel?state=executing&queue=never-used", {"csrf": token})
    assert done.status == 303
    assert done.headers["location"] == ("/ui/jobs?state=executing&queue=never-used&"
                                        "done=cancelled_all&n=0")
    shown = ui_engine.get(done.headers["location"])
    assert "Cancelled 0 job(s)." in shown.text


def test_actions_need_a_token_from_this_process(ui_engine):
    queue = "csrf-guarded"
    token = ui_engine.get("/ui/queues").csrf()
    path = f"/ui/queues/{queue}/pause"
    foreign = CsrfGuard().issue()  # well formed, signed by another secret
    for form, headers in [({}, {}), ({"csrf": "nonsense"}, {}), ({"csrf": foreign}, {}),
                          ({"csrf": token[:-2] + "AA"}, {}),
                          ({"csrf": token}, {"Origin": "http://evil.example"}),
                          ({"csrf": token}, {"Sec-Fetch-Site": "cross-site"}),
                          ({"csrf": token}, {"Origin": "null"})]:
        refused = ui_engine.post(path, form, headers)
        assert refused.status == 403, (form, headers)
        assert "csrf_rejected" in refused.text
    assert queue not in ui_engine.admin.call("status", {})["engine"]["paused_queues"]
    host = ui_engine.url.split("://", 1)[1]
    done = ui_engine.post(path, {"csrf": token}, {"Origin": f"http://{host}",
                                                  "Sec-Fetch-Site": "same-origin"})
    assert done.status == 303 and done.headers["location"] == "/ui/queues?done=paused"
    assert queue in ui_engine.admin.call("status", {})["engine"]["paused_queues"]
    notice = ui_engine.get(done.headers["location"])
    assert "Queue paused" in notice.text and "no-store" == notice.headers["cache-control"]
    trail = ui_engine.get("/ui/").text.split("Recent operator actions", 1)[1]
    assert "<code>pause_queue</code>" in trail and "dashboard 127.0.0.1:" in trail
    assert str(escape(f'{{"queue":"{queue}"}}')) in trail  # the request, as text
    resumed = ui_engine.post(f"/ui/queues/{queue}/resume", {"csrf": token})
    assert resumed.status == 303
    assert queue not in ui_engine.admin.call("status", {})["engine"]["paused_queues"]


def test_refusals_render_the_engine_reason(ui_engine):
    job_id = ui_engine.enqueue("ui.ok", {"n": 1}, queue="refusals")
    ui_engine.wait_state(job_id, "completed")
    assert "Retry</button>" not in ui_engine.get(f"/ui/jobs/{job_id}").text
    token = ui_engine.get("/ui/storage").csrf()  # as if an older page still offered it
    again = ui_engine.post(f"/ui/jobs/{job_id}/retry", {"csrf": token})
    assert again.status == 409 and "a completed job cannot be retried" in again.text
    assert f'href="/ui/jobs/{job_id}"' in again.text
    missing = ui_engine.get("/ui/jobs/" + "0" * 31 + "7")
    assert missing.status == 404 and "not_found" in missing.text
    assert ui_engine.get("/ui/find?id=" + job_id.upper()).headers["location"] == \
        f"/ui/jobs/{job_id}"
    bad_search = ui_engine.get("/ui/find?id=not-an-id")
    assert bad_search.status == 400 and "32 hexadecimal characters" in bad_search.text
    bad_filter = ui_engine.get("/ui/jobs?state=bogus")
    assert bad_filter.status == 400 and "state must be one of" in bad_filter.text
    compact = ui_engine.post("/ui/storage/compact", {"csrf": token})  # online, Store v2
    assert compact.status == 303 and compact.headers["location"] == "/ui/storage?done=compacted"
    epoch = ui_engine.admin.call("status", {})["storage"]["epoch"]
    storage = ui_engine.get("/ui/storage?done=compacted").text
    assert "Compaction finished." in storage and epoch in storage and 'pause_ms' in storage
    assert "writes paused" in storage and "(admin)" in storage
    assert ui_engine.get("/ui/schedules/no-such").status == 404
    form = ui_engine.request("POST", f"/ui/jobs/{job_id}/retry", b"{}",
                             {"Content-Type": "application/json"})
    assert form.status == 415
    scale = "/ui/queues/refusals/scale"
    for concurrency, reason in (("many", "a whole number of credits"), ("", "a whole number"),
                                ("0", "concurrency must be an integer in 1..65536"),
                                ("65537", "concurrency must be an integer in 1..65536")):
        bad = ui_engine.post(scale, {"csrf": token, "concurrency": concurrency})
        assert bad.status == 400 and reason in bad.text, concurrency
        assert 'href="/ui/queues/refusals/scale"' in bad.text  # back to the form
    assert "refusals" not in ui_engine.admin.call("status", {})["engine"]["scaled_queues"]


def test_jobs_pages_follow_cursors_newer_and_older(ui_engine):
    queue = "paging"
    ui_engine.admin.call("pause_queue", {"queue": queue})
    ids = [ui_engine.enqueue("ui.ok", {"n": n}, queue=queue) for n in range(55)]
    first = ui_engine.get(f"/ui/jobs?queue={queue}")
    assert rows(first.text) == list(reversed(ids))[:50] and "Newer" not in first.text
    older = html.unescape(re.search(r'href="([^"]+)" rel="next"', first.text).group(1))
    second = ui_engine.get(older)
    assert rows(second.text) == list(reversed(ids))[50:] and "Page 2" in second.text
    newer = html.unescape(re.search(r'href="([^"]+)" rel="prev"', second.text).group(1))
    assert rows(ui_engine.get(newer).text) == rows(first.text)
    ui_engine.admin.call("purge_queue", {"queue": queue})
    ui_engine.admin.call("resume_queue", {"queue": queue})


def test_limit_sets_and_lifts_a_queue_s_rate_limit(ui_engine):
    queue = "ui-limited"
    form = ui_engine.get(f"/ui/queues/{queue}/limit")
    assert form.status == 200 and "It has no rate limit" in form.text
    token = form.csrf()
    done = ui_engine.post(f"/ui/queues/{queue}/limit",
                          {"csrf": token, "starts": "3", "period": "2", "unit": "min"})
    assert done.status == 303 and "done=limited" in done.headers["location"]
    assert ui_engine.admin.call("status", {})["engine"]["rate_limited_queues"][queue] == {
        "starts": 3, "period_ms": 120_000}
    notice = ui_engine.get(done.headers["location"]).text
    assert "at most 3 job start(s) in any 2 min" in notice
    assert "≤ 3 per 2 min" in notice
    again = ui_engine.get(f"/ui/queues/{queue}/limit").text
    assert 'value="2"' in again and '<option value="min" selected>' in again
    bad = ui_engine.post(f"/ui/queues/{queue}/limit",
                         {"csrf": token, "starts": "0", "period": "1", "unit": "s"})
    assert bad.status == 400 and "starts must be an integer in 1..10,000" in bad.text
    assert f'href="/ui/queues/{queue}/limit"' in bad.text  # back to the form
    lifted = ui_engine.post(f"/ui/queues/{queue}/limit", {"csrf": token, "starts": "none"})
    assert lifted.headers["location"] == "/ui/queues?done=unlimited"
    assert queue not in ui_engine.admin.call("status", {})["engine"]["rate_limited_queues"]


def test_the_history_page_shows_the_days_asked_for(ui_engine):
    job_id = ui_engine.enqueue("ui.ok", {"n": 1}, queue="history-page")
    ui_engine.wait_state(job_id, "completed")
    for query, shown in (("", 30), ("?days=7", 7), ("?days=180", 180), ("?days=8", 30),
                         ("?days=%3Cb%3E", 30)):
        page = ui_engine.get(f"/ui/history{query}")
        assert page.status == 200
        assert len(re.findall(r"<tr><th scope=\"row\"><time", page.text)) == shown, query
        assert "today" in page.text and "<svg" in page.text
        assert f'aria-current="true">{shown} days' in page.text
