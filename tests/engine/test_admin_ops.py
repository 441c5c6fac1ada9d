"""Engine side of the operations API: pages and indexes, actions, replay of the new pairs."""

from __future__ import annotations

import random

import pytest

from tay.engine import CancelExecution, Engine, EngineConfig, Execute
from tay.engine import commands as c
from tay.engine.handlers import admin as admin_ops
from tay.engine.retained.job_index import COMPACT_FLOOR
from tay.engine.state import MAX_TIMELINE
from tay.storage import events as ev

from .conftest import Driver, refusal, reply


def admin(driver: Driver, op: str, **body) -> dict:
    return reply(driver.run(c.Admin("p", driver.rid(), op, body))).fields


def refused(driver: Driver, op: str, **body) -> str:
    return refusal(driver.run(c.Admin("p", driver.rid(), op, body)))["code"]


def executes(out):
    return [e for e in out.effects if isinstance(e, Execute)]


def replayed(driver: Driver) -> Engine:
    fresh = Engine(EngineConfig(), random.Random(1))
    for sequence, event in driver.journal:
        fresh.consume_event(sequence, event)
    return fresh


def test_pages_filter_and_follow_cursors_newest_change_first():
    driver = Driver()
    ids = {queue: [driver.job_id(queue=queue) for _ in range(5)] for queue in ("a", "b")}
    driver.advance(1)
    cancelled = admin(driver, "cancel_job", job_id=ids["a"][0])["job"]
    assert cancelled["state"] == "cancelled"
    rows = admin(driver, "jobs", limit=100)["jobs"]
    assert rows[0]["id"] == ids["a"][0]  # the last change is first
    seen, cursor = [], None
    while True:
        page = admin(driver, "jobs", queue="a", state="available", limit=2,
                     **({"cursor": cursor} if cursor else {}))
        seen += [row["id"] for row in page["jobs"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == list(reversed(ids["a"][1:]))
    assert [r["id"] for r in admin(driver, "jobs", task="t", queue="b")["jobs"]] == \
        list(reversed(ids["b"]))
    assert admin(driver, "jobs", state="discarded")["jobs"] == []


def test_index_lists_stay_bounded_under_churn():
    driver = Driver()
    job_id = driver.job_id(queue="q")
    for _ in range(3 * COMPACT_FLOOR):
        admin(driver, "cancel_job", job_id=job_id)
        admin(driver, "retry_job", job_id=job_id)
    lists = driver.engine.job_index._lists
    assert all(len(entries) <= 2 * 1 + COMPACT_FLOOR + 1 for entries in lists.values())
    assert [r["id"] for r in admin(driver, "jobs")["jobs"]] == [job_id]


def test_a_page_stops_after_the_scan_limit_with_a_cursor(monkeypatch):
    monkeypatch.setattr(admin_ops, "SCAN_LIMIT", 10)
    driver = Driver()
    wanted = driver.job_id(queue="rare")
    for _ in range(25):
        driver.job_id(queue="common")
    page = admin(driver, "jobs", task="t", queue="rare")  # both filters: the smaller list
    assert [r["id"] for r in page["jobs"]] == [wanted]
    page = admin(driver, "jobs", task="t", state="available", limit=100)
    assert len(page["jobs"]) == 10 and page["next_cursor"] is not None
    rest = admin(driver, "jobs", task="t", state="available", limit=100, cursor=page["next_cursor"])
    assert len(rest["jobs"]) == 10


def test_pause_stops_dispatch_survives_replay_and_resume_dispatches():
    driver = Driver()
    driver.worker()
    admin(driver, "pause_queue", queue="default")
    assert not executes(driver.enqueue())
    assert admin(driver, "pause_queue", queue="default")["queue"]["paused"]  # idempotent
    assert [e.name for _, e in driver.journal].count("queue_paused") == 1
    assert replayed(driver).paused == {"default"}
    out = driver.run(c.Admin("p", driver.rid(), "resume_queue", {"queue": "default"}))
    assert len(executes(out)) == 1
    assert replayed(driver).paused == set()


def test_scale_sets_credits_durably_over_the_configured_ones_and_configured_restores():
    driver = Driver(EngineConfig(queues={"q": 1}))
    driver.worker(capacity=10)
    started = [executes(driver.enqueue(queue="q")) for _ in range(4)]
    assert [len(e) for e in started] == [1, 0, 0, 0]  # one credit
    out = driver.run(c.Admin("p", driver.rid(), "scale_queue", {"queue": "q",
                                                                 "concurrency": 3}))
    view = reply(out).fields["queue"]
    assert (view["credits"], view["configured_credits"], view["scaled"]) == (3, 1, True)
    assert len(executes(out)) == 2  # the scale dispatched the two it now has room for
    assert admin(driver, "scale_queue", queue="q", concurrency=3)["queue"]["credits"] == 3
    assert [e.name for _, e in driver.journal].count("queue_scaled") == 1  # idempotent
    fresh = replayed(driver)
    assert (fresh.scaled, fresh.credit_limits["q"]) == ({"q": 3}, 3)
    # lowered below what runs: the running finish, nothing new starts until fewer run
    view = admin(driver, "scale_queue", queue="q", concurrency=1)["queue"]
    assert (view["credits"], view["executing"]) == (1, 3)
    first = started[0][0]
    assert not executes(driver.succeed(first, {}))  # 2 still run against 1 credit
    # a queue never configured can be scaled too, and 'configured' returns it to the default
    assert admin(driver, "scale_queue", queue="other", concurrency=2)["queue"]["credits"] == 2
    assert "other" in {q["name"] for q in admin(driver, "queues")["queues"]}
    assert admin(driver, "overview")["scaled_queues"] == {"other": 2, "q": 1}
    back = admin(driver, "scale_queue", queue="q", concurrency=None)["queue"]
    assert (back["credits"], back["scaled"]) == (1, False)
    assert admin(driver, "scale_queue", queue="other", concurrency=None)["queue"]["credits"] == 10
    fresh = replayed(driver)
    assert fresh.scaled == {} and fresh.credit_limits == dict(fresh.config.queues)
    for body, field in (({"queue": "q"}, "concurrency"), ({"queue": "q", "concurrency": 0},
                        "concurrency"), ({"queue": "q", "concurrency": 65_537}, "concurrency"),
                        ({"queue": "q", "concurrency": "2"}, "concurrency"),
                        ({"queue": "q", "concurrency": True}, "concurrency"),
                        ({"queue": "", "concurrency": 2}, "queue"),
                        ({"queue": "q", "concurrency": 2, "x": 1}, "x")):
        failure = refusal(driver.run(c.Admin("p", driver.rid(), "scale_queue", body)))
        assert (failure["code"], failure.get("field")) == ("invalid_request", field), body


def test_replay_applies_the_configured_credits_of_the_replaying_engine():
    """A scale holds over whatever credits the next start configures; its reset returns to
    them, not to the ones configured when it was written."""
    driver = Driver(EngineConfig(queues={"q": 2}))
    admin(driver, "scale_queue", queue="q", concurrency=7)
    admin(driver, "scale_queue", queue="q", concurrency=None)
    admin(driver, "scale_queue", queue="r", concurrency=4)
    fresh = Engine(EngineConfig(queues={"q": 5, "r": 6}), random.Random(1))
    for sequence, event in driver.journal:
        fresh.consume_event(sequence, event)
    assert fresh.credit_limits == {"q": 5, "r": 4}


def test_retry_discarded_requeue_cancelled_and_refusals():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue())
    out = driver.fail(execute, {"type": "KeyError", "message": "'x'", "traceback": "tb"})
    job = admin(driver, "job", job_id=execute.job_id)["job"]
    assert job["state"] == "discarded" and job["failure"] == {"type": "KeyError",
                                                              "message": "'x'", "traceback": "tb"}
    assert [a["outcome"] for a in job["attempts"]] == ["discarded"]
    assert refusal(driver.run(c.Result("p", "x", execute.job_id)))["failure"]["type"] == "KeyError"
    out = driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": execute.job_id}))
    (again,) = executes(out)
    assert refused(driver, "retry_job", job_id=execute.job_id) == "retry_rejected"  # executing
    driver.succeed(again, {"ok": 1})
    assert refused(driver, "retry_job", job_id=execute.job_id) == "retry_rejected"  # completed
    assert refused(driver, "cancel_job", job_id=execute.job_id) == "cancel_rejected"
    admin(driver, "pause_queue", queue="default")
    waiting = driver.job_id()
    admin(driver, "cancel_job", job_id=waiting)
    assert admin(driver, "retry_job", job_id=waiting)["job"]["state"] == "available"
    fresh = replayed(driver)
    assert fresh.job(bytes.fromhex(waiting)).state == "available"
    assert fresh.job(bytes.fromhex(execute.job_id)).failure["type"] == "KeyError"
    assert refused(driver, "job", job_id="0" * 31 + "9") == "not_found"
    assert refused(driver, "job", job_id="zz") == "invalid_job_id"


def test_retry_runs_a_scheduled_job_now_and_its_old_due_time_delivers_nothing():
    """A scheduled job retried runs now at its first attempt, through a replay too; the
    timer of its scheduled time finds it changed; retry_jobs runs a page of them."""
    driver = Driver()
    waiting = [driver.job_id(delay=3600) for _ in range(3)]
    ready = driver.job_id()
    assert refused(driver, "retry_job", job_id=ready) == "retry_rejected"  # available
    admin(driver, "cancel_job", job_id=ready)
    driver.worker(capacity=1)
    out = driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": waiting[0]}))
    assert reply(out).fields["job"]["state"] == "available"  # as the action left it
    (first,) = executes(out)
    assert first.job_id == waiting[0] and driver.status(waiting[0])["attempt"] == 1
    assert executes(driver.succeed(first)) == []  # the others wait for their time
    assert driver.status(waiting[0])["state"] == "completed"
    done = admin(driver, "retry_jobs", state="scheduled", limit=10)
    assert (done["retried"], done["next_cursor"]) == (2, None)
    assert sorted(driver.status(job_id)["state"] for job_id in waiting[1:]) == \
        ["available", "executing"]
    driver.advance(3_600_000)
    out = driver.tick()
    assert [e for _, e in out.events if e.pair == ev.JOB_AVAILABLE] == []
    fresh = replayed(driver)
    for job_id in waiting:
        assert fresh.job(bytes.fromhex(job_id)).state == driver.status(job_id)["state"]


def test_retry_jobs_retries_one_state_in_batches_and_its_cursors_end():
    """Each job of the state (and queue) is retried once, even one that fails back into
    the state between batches; packed jobs come out to be retried; other queues and states
    are untouched; a replay holds the same states."""
    driver = Driver()
    driver.engine.start_packing()
    driver.worker(capacity=100)

    def discarded(queue: str) -> str:
        (execute,) = executes(driver.enqueue(queue=queue))
        driver.fail(execute)
        return execute.job_id

    in_a = [discarded("a") for _ in range(5)]
    in_b = [discarded("b") for _ in range(2)]
    driver.engine.pack_finished(1000)
    driver.engine.pack_finished(1000)
    packed = driver.engine.finished.packed
    assert all(bytes.fromhex(job_id) in packed for job_id in in_a + in_b)
    retried, cursor, batches = [], None, 0
    while True:
        body = {"state": "discarded", "queue": "a", "limit": 2}
        out = driver.run(c.Admin("p", driver.rid(), "retry_jobs",
                                 {**body, **({"cursor": cursor} if cursor else {})}))
        fields = reply(out).fields
        started = executes(out)  # a new cycle each, dispatched at once
        assert len(started) == fields["retried"] <= 2
        retried += [execute.job_id for execute in started]
        for execute in started:
            driver.fail(execute)  # discarded again: changed since, not visited again
        batches += 1
        if (cursor := fields["next_cursor"]) is None:
            break
    assert sorted(retried) == sorted(in_a) and batches == 3
    assert {driver.status(job_id)["state"] for job_id in in_a + in_b} == {"discarded"}
    assert admin(driver, "job", job_id=in_a[0])["job"]["attempts"][-1]["outcome"] == "discarded"
    again = admin(driver, "retry_jobs", state="discarded", task="nobody")
    assert (again["retried"], again["next_cursor"]) == (0, None)
    admin(driver, "pause_queue", queue="c")
    cancelled = [driver.job_id(queue="c") for _ in range(3)]
    for job_id in cancelled:
        admin(driver, "cancel_job", job_id=job_id)
    done = admin(driver, "retry_jobs", state="cancelled")
    assert (done["retried"], done["next_cursor"]) == (3, None)
    assert {driver.status(job_id)["state"] for job_id in cancelled} == {"available"}
    driver.worker(conn="w9", tasks=("v",))
    (execute,) = executes(driver.enqueue(task="v", queue="d"))
    driver.run(c.Disconnect("w9"))  # interrupted: retryable after a backoff
    assert driver.status(execute.job_id)["state"] == "retryable"
    assert admin(driver, "retry_jobs", state="retryable")["retried"] == 1
    job = driver.status(execute.job_id)
    assert job["state"] == "available" and job["attempt"] == 1  # now, the same attempt
    fresh = replayed(driver)
    for job_id in in_a + in_b + cancelled + [execute.job_id]:
        assert fresh.job(bytes.fromhex(job_id)).state == driver.status(job_id)["state"]


@pytest.mark.parametrize("body", [{}, {"state": "completed"}, {"state": "executing"},
                                  {"state": "discarded", "limit": 10_001},
                                  {"state": "discarded", "limit": 0},
                                  {"state": "discarded", "cursor": "x"},
                                  {"state": "discarded", "queue": ""},
                                  {"state": "discarded", "job_id": "0" * 32}])
def test_retry_jobs_refuses_a_bad_request(body):
    assert refused(Driver(), "retry_jobs", **body) == "invalid_request"


def test_volatile_failure_details_are_kept_in_memory_only():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(durability="volatile"))
    out = driver.fail(execute)
    assert out.events == []
    assert admin(driver, "job", job_id=execute.job_id)["job"]["failure"]["message"] == "boom"


def test_purge_cancels_waiting_jobs_in_batches():
    driver = Driver()
    admin(driver, "pause_queue", queue="q")
    ids = [driver.job_id(queue="q") for _ in range(5)]
    other = driver.job_id(queue="r")
    first = admin(driver, "purge_queue", queue="q", limit=2)
    assert (first["purged"], first["remaining"]) == (2, 3)
    assert admin(driver, "purge_queue", queue="q")["remaining"] == 0
    assert {driver.status(job_id)["state"] for job_id in ids} == {"cancelled"}
    assert driver.status(other)["state"] == "available"
    assert refused(driver, "purge_queue", queue="q", limit=0) == "invalid_request"


def test_workers_unserved_tasks_queues_and_activity():
    driver = Driver()
    driver.worker(tasks=("t",), capacity=3)
    driver.run(c.Connect("h1", "worker", "http-1", 2, "default", driver.rid()))
    driver.enqueue(task="nobody")
    workers = admin(driver, "workers")
    assert {(w["runtime_id"], w["transport"]) for w in workers["workers"]} == {
        ("rt-w1", "socket"), ("http-1", "http")}
    assert [(u["queue"], u["task"]) for u in workers["unserved"]] == [("default", "nobody")]
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute)
    (queue,) = admin(driver, "queues")["queues"]
    assert queue["by_state"]["completed"] == 1 and queue["waiting"] == 1
    minute = admin(driver, "activity")["per_minute"][-1]
    assert (minute["enqueued"], minute["completed"], minute["failed"]) == (2, 1, 0)
    assert driver.engine.activity.jobs[("completed", "default", "t")] == 1


def test_a_queue_latency_is_how_long_its_oldest_ready_job_waited():
    """From when the job became ready (a delayed one: its due time, not its enqueue), over
    every task of the queue, through a pause; 0 and no ``oldest_ready_at`` when none is
    ready."""
    driver = Driver()

    def queues() -> dict:
        driver.tick()
        return {q["name"]: q for q in admin(driver, "queues")["queues"]}

    assert queues()["default"]["latency_ms"] == 0
    assert queues()["default"]["oldest_ready_at"] is None
    first_at = driver.now
    driver.job_id(queue="q")  # task t: nobody runs it yet
    driver.advance(1_500)
    second_at = driver.now
    driver.job_id(queue="q", task="u")
    driver.job_id(queue="later", delay_ms=10_000)
    driver.advance(500)
    seen = queues()
    assert (seen["q"]["oldest_ready_at"], seen["q"]["latency_ms"]) == (first_at, 2_000)
    assert (seen["later"]["oldest_ready_at"], seen["later"]["latency_ms"]) == (None, 0)
    driver.advance(12_500)  # the delayed job has been due for 3 s
    seen = queues()
    assert seen["later"]["latency_ms"] == 3_000
    assert seen["later"]["oldest_ready_at"] == second_at + 10_000
    assert seen["q"]["latency_ms"] == 14_500
    admin(driver, "pause_queue", queue="q")
    driver.advance(1_000)
    assert queues()["q"]["latency_ms"] == 15_500  # a paused queue's jobs wait on
    admin(driver, "resume_queue", queue="q")
    driver.worker(tasks=("t",))  # the oldest starts: the next one is now the oldest
    seen = queues()
    assert (seen["q"]["oldest_ready_at"], seen["q"]["latency_ms"]) == (second_at, 14_000)
    assert admin(driver, "pause_queue", queue="q")["queue"]["latency_ms"] == 14_000
    assert queues()["later"]["oldest_ready_at"] is None  # the worker took it too
    fresh = replayed(driver)  # a restart does not reset it
    assert fresh.oldest_ready_at("q") == second_at


@pytest.mark.parametrize("op, body", [("nope", {}), ("jobs", {"state": "x"}),
                                      ("jobs", {"limit": 101}), ("pause_queue", {"queue": ""}),
                                      ("queues", {"x": 1})])
def test_bad_admin_requests_are_refused(op, body):
    driver = Driver()
    assert refused(driver, op, **body) == "invalid_request"


def test_one_schedule_and_its_cancellation_through_the_admin_ops():
    driver = Driver()
    driver.worker(tasks=("t",))
    driver.run(c.Schedule("p", driver.rid(), {"declaration_id": "nightly", "task": "t",
                                              "every": {"minutes": 1}}))
    (delivered,) = executes(driver.tick())
    one = admin(driver, "schedule", schedule_id="nightly")["schedule"]
    assert one["id"] == "nightly" and one["last_job"] == {"id": delivered.job_id,
                                                          "state": "executing"}
    assert one["next_occurrences"] == [one["next_at"] + k * 60_000 for k in range(5)]
    assert admin(driver, "schedules")["schedules"] == [one]
    out = driver.run(c.Admin("p", driver.rid(), "cancel_schedule", {"schedule_id": "nightly"}))
    assert [event.name for _, event in out.events] == ["schedule_state"]
    cancelled = reply(out).fields["schedule"]
    assert cancelled["cancelled_at"] == driver.now and cancelled["next_at"] is None
    assert cancelled["next_occurrences"] == []
    again = driver.run(c.Admin("p", driver.rid(), "cancel_schedule", {"schedule_id": "nightly"}))
    assert again.events == [] and reply(again).fields["schedule"] == cancelled
    driver.advance(3_600_000)
    assert executes(driver.tick()) == []
    assert replayed(driver).schedules.get("nightly").cancelled
    assert refused(driver, "schedule", schedule_id="nope") == "schedule_not_found"
    assert refused(driver, "cancel_schedule", schedule_id=7) == "invalid_schedule_id"
    assert refused(driver, "cancel_schedule", schedule_id="nightly", x=1) == "invalid_request"


def test_workers_list_what_each_executor_runs_oldest_first(monkeypatch):
    monkeypatch.setattr(admin_ops, "RUNNING_SHOWN", 2)
    driver = Driver()
    driver.worker(conn="w1", tasks=("t",), capacity=3, runtime_id="busy-1")
    started = []
    for n in range(3):
        (execute,) = executes(driver.enqueue(args={"n": n}, timeout_ms=60_000 + n))
        started.append((execute, driver.now))
        driver.advance(1_000)
    (worker,) = [w for w in admin(driver, "workers")["workers"] if w["runtime_id"] == "busy-1"]
    assert worker["in_flight"] == 3 and len(worker["running"]) == 2  # the bound
    assert worker["running"] == [
        {"job_id": execute.job_id, "task": "t", "queue": "default", "attempt": 1,
         "started_at": at, "timeout_at": at + 60_000 + n}
        for n, (execute, at) in enumerate(started[:2])]
    driver.succeed(started[0][0], {})
    (worker,) = [w for w in admin(driver, "workers")["workers"] if w["runtime_id"] == "busy-1"]
    assert [r["job_id"] for r in worker["running"]] == [e.job_id for e, _ in started[1:]]


def test_run_schedule_enqueues_one_job_of_its_definition_now_outside_its_cadence():
    driver = Driver()
    driver.worker(tasks=("t",), capacity=1)
    driver.run(c.Schedule("p", driver.rid(), {
        "declaration_id": "digest", "task": "t", "args": {"to": "ops"}, "every": {"hours": 1},
        "options": {"queue": "mail", "retries": 1, "timeout_ms": 45_000}}))
    before = admin(driver, "schedule", schedule_id="digest")["schedule"]
    out = driver.run(c.Admin("p", driver.rid(), "run_schedule", {"schedule_id": "digest"}))
    fields = reply(out).fields
    (started,) = executes(out)  # dispatched at once, like any enqueue
    job = admin(driver, "job", job_id=started.job_id)["job"]
    assert fields["job"]["id"] == started.job_id and job["args"] == {"to": "ops"}
    assert (job["queue"], job["max_attempts"], job["task"]) == ("mail", 2, "t")
    assert started.timeout_ms == 45_000  # the deadline counted on the monotonic clock
    assert driver.engine._timeouts.peek_due() == driver.mono + 45_000
    # not an occurrence: the cadence, the last job and the membership are untouched
    assert fields["schedule"] == {**before, "last_job": None} == admin(
        driver, "schedule", schedule_id="digest")["schedule"]
    assert [e.name for _, e in out.events] == ["job_inserted", "job_started"]
    second = reply(driver.run(c.Admin("p", driver.rid(), "run_schedule",
                                      {"schedule_id": "digest"}))).fields["job"]
    assert second["id"] != started.job_id and second["state"] == "available"  # capacity 1
    fresh = replayed(driver)
    assert {fresh.job(bytes.fromhex(j)).state for j in (started.job_id, second["id"])} == {
        "executing", "available"}
    assert refused(driver, "run_schedule", schedule_id="nope") == "schedule_not_found"
    assert refused(driver, "run_schedule", schedule_id=3) == "invalid_schedule_id"
    assert refused(driver, "run_schedule", schedule_id="digest", at=1) == "invalid_request"


def index_pages(engine: Engine) -> dict:
    """Every list's full page (ids, newest change first) and its live size."""
    index = engine.job_index
    return {key: (index.page(key, None, 10_000, lambda _: True, 10_000)[0], index.size(key))
            for key in sorted(index._lists)}


def test_a_replay_that_defers_the_index_builds_the_same_pages_on_first_use():
    driver = Driver()
    rng = random.Random(7)
    ids = [driver.job_id(queue=rng.choice("abc")) for _ in range(40)]
    driver.advance(1)
    for job_id in rng.sample(ids, 15):
        admin(driver, "cancel_job", job_id=job_id)
    for job_id in rng.sample(ids, 10):
        if admin(driver, "job", job_id=job_id)["job"]["state"] == "cancelled":
            admin(driver, "retry_job", job_id=job_id)
    fresh = Engine(EngineConfig(), random.Random(1))
    fresh.defer_job_index()
    for sequence, event in driver.journal:
        fresh.consume_event(sequence, event)
    assert fresh._job_index is None  # nothing built while replaying
    assert index_pages(fresh) == index_pages(replayed(driver)) == index_pages(driver.engine)
    assert sum(len(entries) for entries in fresh.job_index._lists.values()) == 4 * len(ids)
    with pytest.raises(RuntimeError):
        fresh.defer_job_index()  # too late: jobs exist


def test_the_attempt_timeline_keeps_the_latest_attempts_in_order():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue())
    for round_ in range(MAX_TIMELINE + 5):
        driver.advance(10)
        driver.fail(execute)
        timeline = admin(driver, "job", job_id=execute.job_id)["job"]["attempts"]
        assert len(timeline) == min(round_ + 1, MAX_TIMELINE)
        assert timeline[-1]["outcome"] == "discarded" and \
            timeline[-1]["finished_at"] == driver.now
        assert [a["started_at"] for a in timeline] == sorted(a["started_at"] for a in timeline)
        (execute,) = executes(driver.run(c.Admin("p", driver.rid(), "retry_job",
                                                 {"job_id": execute.job_id})))
    timeline = admin(driver, "job", job_id=execute.job_id)["job"]["attempts"]
    assert len(timeline) == MAX_TIMELINE and timeline[-1]["finished_at"] is None


def test_a_paused_schedule_delivers_nothing_and_a_resume_skips_what_it_missed():
    driver = Driver()
    driver.worker(tasks=("t",), capacity=10)
    driver.run(c.Schedule("p", driver.rid(), {"declaration_id": "tick", "task": "t",
                                              "every": {"minutes": 1}}))
    assert len(executes(driver.tick())) == 1  # the first occurrence, due at once
    out = driver.run(c.Admin("p", driver.rid(), "pause_schedule", {"schedule_id": "tick"}))
    assert [event.name for _, event in out.events] == ["schedule_paused"]
    paused = reply(out).fields["schedule"]
    assert paused["paused"] is True
    again = driver.run(c.Admin("p", driver.rid(), "pause_schedule", {"schedule_id": "tick"}))
    assert again.events == []  # idempotent
    missed_from = paused["next_at"]
    driver.advance(10 * 60_000)
    assert executes(driver.tick()) == [] and driver.engine.next_wakeup() is None
    # a re-declaration (a deploy) keeps the pause; so does a restart
    driver.run(c.Schedule("p", driver.rid(), {"declaration_id": "tick", "task": "t",
                                              "every": {"minutes": 2}}))
    driver.advance(60_000)
    assert executes(driver.tick()) == []
    assert replayed(driver).schedules.paused == {"tick"}
    out = driver.run(c.Admin("p", driver.rid(), "resume_schedule", {"schedule_id": "tick"}))
    assert [event.name for _, event in out.events] == ["schedule_state", "schedule_resumed"]
    assert out.events[0][1]["action"] == "advanced"
    resumed = reply(out).fields["schedule"]
    assert resumed["paused"] is False and resumed["next_at"] > driver.now > missed_from
    assert executes(driver.tick()) == []  # no backlog of the missed due times
    driver.advance(resumed["next_at"] - driver.now)
    assert len(executes(driver.tick())) == 1  # the cadence goes on
    fresh = replayed(driver)
    assert fresh.schedules.paused == set()
    assert fresh.schedules.get("tick").next_at == driver.engine.schedules.get("tick").next_at
    assert driver.run(c.Admin("p", driver.rid(), "resume_schedule",
                              {"schedule_id": "tick"})).events == []
    driver.run(c.Admin("p", driver.rid(), "cancel_schedule", {"schedule_id": "tick"}))
    assert refused(driver, "pause_schedule", schedule_id="tick") == "schedule_conflict"
    assert refused(driver, "pause_schedule", schedule_id="nope") == "schedule_not_found"
    assert refused(driver, "resume_schedule", schedule_id=1) == "invalid_schedule_id"
    assert refused(driver, "resume_schedule", schedule_id="tick", x=1) == "invalid_request"


def test_a_resume_before_the_next_due_time_writes_no_skip():
    driver = Driver()
    reply(driver.run(c.Schedule("p", driver.rid(), {"declaration_id": "hourly", "task": "t",
                                                    "every": {"hours": 1}, "delay": 300})))
    admin(driver, "pause_schedule", schedule_id="hourly")
    driver.advance(299_999)
    out = driver.run(c.Admin("p", driver.rid(), "resume_schedule", {"schedule_id": "hourly"}))
    assert [event.name for _, event in out.events] == ["schedule_resumed"]


def test_cancel_jobs_cancels_one_state_of_a_task_in_batches_and_stops_running_ones():
    driver = Driver()
    driver.worker(conn="w1", tasks=("send",), capacity=2)
    running = [execute.job_id for n in range(2)
               for execute in executes(driver.enqueue(task="send", args={"n": n}))]
    waiting = [driver.job_id(task="send", args={"n": 10 + n}) for n in range(5)]  # no credit
    other_task = driver.job_id(task="report")
    delayed = driver.job_id(task="send", delay_ms=60_000)
    seen, cursor, batches = [], None, 0
    while True:
        out = driver.run(c.Admin("p", driver.rid(), "cancel_jobs", {
            "state": "available", "task": "send", "limit": 2,
            **({"cursor": cursor} if cursor else {})}))
        fields = reply(out).fields
        assert fields["cancelled"] <= 2 and not executes(out)
        seen += [job_id for _, event in out.events for job_id in [event["job_id"].hex()]]
        batches += 1
        if (cursor := fields["next_cursor"]) is None:
            break
    assert sorted(seen) == sorted(waiting) and batches == 3
    assert {driver.status(job_id)["state"] for job_id in waiting} == {"cancelled"}
    assert driver.status(other_task)["state"] == "available"
    assert driver.status(delayed)["state"] == "scheduled"
    out = driver.run(c.Admin("p", driver.rid(), "cancel_jobs", {"state": "executing"}))
    assert reply(out).fields["cancelled"] == 2
    stopped = [e for e in out.effects if isinstance(e, CancelExecution)]
    assert sorted(e.conn for e in stopped) == ["w1", "w1"]
    assert {driver.status(job_id)["state"] for job_id in running} == {"cancelled"}
    assert admin(driver, "cancel_jobs", state="scheduled")["cancelled"] == 1
    fresh = replayed(driver)
    for job_id in running + waiting + [other_task, delayed]:
        assert fresh.job(bytes.fromhex(job_id)).state == driver.status(job_id)["state"]


@pytest.mark.parametrize("body", [{}, {"state": "completed"}, {"state": "cancelled"},
                                  {"state": "available", "limit": 10_001},
                                  {"state": "available", "task": ""},
                                  {"state": "available", "job_id": "0" * 32}])
def test_cancel_jobs_refuses_a_bad_request(body):
    assert refused(Driver(), "cancel_jobs", **body) == "invalid_request"


@pytest.mark.parametrize("fused", [False, True])
def test_tasks_gives_each_task_s_outcomes_and_run_times(fused):
    """Through the general path (a v1 store) and the fused success of an epoch alike."""
    from tests.engine.test_fused_commits import epoch_driver

    driver = epoch_driver(1, "none", True) if fused else Driver()
    queue = "q1" if fused else "default"
    driver.worker(tasks=("t", "u"), capacity=10)
    for run_ms in (3, 40, 40, 200):
        (execute,) = executes(driver.enqueue(queue=queue))
        driver.advance(run_ms)
        driver.succeed(execute)
    (execute,) = executes(driver.enqueue(task="u", queue=queue, retries=0))
    driver.advance(7_000)
    driver.fail(execute)
    driver.enqueue(task="nobody", queue=queue)
    fields = admin(driver, "tasks")
    assert [row["task"] for row in fields["tasks"]] == ["t", "u", "nobody"]  # busiest first
    rows = {row["task"]: row for row in fields["tasks"]}
    t = rows["t"]
    assert (t["enqueued"], t["completed"], t["runs"], t["run_ms_total"], t["run_ms_mean"]) \
        == (4, 4, 4, 283, 70)
    assert (t["run_ms_p50"], t["run_ms_p95"], t["run_ms_p99"]) == (50, 250, 250)
    assert t["run_histogram"][:6] == [1, 0, 0, 2, 0, 1]  # <= 5, 10, 25, 50, 100, 250 ms
    assert (rows["u"]["discarded"], rows["u"]["run_ms_p50"]) == (1, 10_000)
    assert (rows["nobody"]["runs"], rows["nobody"]["run_ms_p50"]) == (0, None)
    assert (t["executors"], rows["nobody"]["executors"]) == (1, 0)
    assert fields["run_bounds_ms"][:3] == [5, 10, 25] and fields["more"] is False
    assert admin(driver, "tasks", limit=1)["more"] is True
    assert refused(driver, "tasks", limit=1_001) == "invalid_request"


def test_tasks_of_the_last_hour_leave_out_what_ran_before_it():
    """window=hour: what each task counted in the hour that ends now (sampled every few
    seconds by the server; here by each read), against everything since start."""
    driver = Driver()
    driver.worker(tasks=("t", "u"), capacity=10)
    for _ in range(4):
        (execute,) = executes(driver.enqueue())
        driver.advance(3)
        driver.succeed(execute)
    hour = admin(driver, "tasks", window="hour")
    assert hour["window"] == "hour" and [r["completed"] for r in hour["tasks"]] == [4]
    driver.advance(30 * 60_000)
    (execute,) = executes(driver.enqueue(task="u", retries=0))
    driver.advance(400)
    driver.fail(execute)
    admin(driver, "tasks", window="hour")  # a sample at minute 30
    driver.advance(31 * 60_000)  # the first four are more than an hour old now
    (execute,) = executes(driver.enqueue())
    driver.advance(400)
    driver.succeed(execute)
    rows = {r["task"]: r for r in admin(driver, "tasks", window="hour")["tasks"]}
    t, u = rows["t"], rows["u"]
    assert (t["enqueued"], t["completed"], t["runs"], t["run_ms_total"]) == (1, 1, 1, 400)
    assert (t["run_ms_p50"], t["run_histogram"][6]) == (500, 1)  # <= 500 ms
    assert (u["discarded"], u["runs"], u["run_ms_p99"]) == (1, 1, 500)
    since_start = {r["task"]: r for r in admin(driver, "tasks")["tasks"]}
    assert since_start["t"]["completed"] == 5 and admin(driver, "tasks")["window"] == "start"
    driver.advance(61 * 60_000)
    assert admin(driver, "tasks", window="hour")["tasks"] == []  # a quiet hour
    assert refused(driver, "tasks", window="day") == "invalid_request"


def test_a_quiet_worker_finishes_what_it_runs_and_is_offered_nothing_new():
    """Quiet: the worker's running execution finishes, new jobs go to the other worker or
    wait; a reconnect of the same runtime stays quiet; unquiet offers it work at once."""
    driver = Driver()
    driver.worker(conn="w1", runtime_id="old", capacity=2)
    (running,) = executes(driver.enqueue())
    assert running.conn == "w1"
    quiet = admin(driver, "quiet_worker", runtime_id="old")
    assert quiet["quiet"] is True and [w["quiet"] for w in quiet["workers"]] == [True]
    waiting = driver.job_id()
    assert driver.status(waiting)["state"] == "available"  # w1 has room, but is quiet
    assert admin(driver, "workers")["unserved"][0]["task"] == "t"
    assert executes(driver.succeed(running)) == []  # its report settles; nothing new
    driver.worker(conn="w2", runtime_id="new", capacity=1)
    assert driver.status(waiting)["state"] == "executing"
    driver.run(c.Disconnect("w1"))
    driver.worker(conn="w3", runtime_id="old", capacity=2)  # the same process, back
    assert [w["quiet"] for w in admin(driver, "workers")["workers"]
            if w["runtime_id"] == "old"] == [True]
    assert admin(driver, "overview")["quiet_workers"] == 1
    other = driver.job_id()
    assert driver.status(other)["state"] == "available"
    out = driver.run(c.Admin("p", driver.rid(), "unquiet_worker", {"runtime_id": "old"}))
    assert [(e.conn, e.job_id) for e in executes(out)] == [("w3", other)]
    assert admin(driver, "overview")["quiet_workers"] == 0


def test_quiet_refuses_a_runtime_with_no_worker_and_a_bad_id():
    driver = Driver()
    driver.run(c.Connect("p1", "client", "producer", 0, None, driver.rid()))
    assert refused(driver, "quiet_worker", runtime_id="producer") == "not_found"
    assert refused(driver, "quiet_worker", runtime_id="nobody") == "not_found"
    assert refused(driver, "unquiet_worker", runtime_id="nobody") == "not_found"
    assert refused(driver, "quiet_worker", runtime_id="") == "invalid_request"
    assert refused(driver, "quiet_worker") == "invalid_request"
    driver.worker(conn="w1", runtime_id="gone")
    admin(driver, "quiet_worker", runtime_id="gone")
    driver.run(c.Disconnect("w1"))
    assert admin(driver, "unquiet_worker", runtime_id="gone")["workers"] == []  # forgotten
    assert refused(driver, "unquiet_worker", runtime_id="gone") == "not_found"


def test_a_rate_limited_queue_starts_at_most_its_starts_in_any_period():
    """2 starts per second: free credits and executors do not start a third before the
    oldest start leaves the period; the engine asks to be woken then; the limit survives a
    replay; lifting it starts what waits at once."""
    driver = Driver()
    driver.worker(capacity=10)
    limited = admin(driver, "limit_queue", queue="default", starts=2, period_ms=1_000)
    assert limited["queue"]["rate_limit"] == {"starts": 2, "period_ms": 1_000}
    ids = [driver.job_id() for _ in range(5)]
    assert [driver.status(i)["state"] for i in ids] == ["executing"] * 2 + ["available"] * 3
    view = admin(driver, "queues")["queues"][0]
    assert view["rate_limited_until"] == driver.now + 1_000
    assert driver.engine.next_wakeup() == driver.mono + 1_000
    driver.advance(999)
    assert executes(driver.tick()) == []
    driver.advance(1)
    assert len(executes(driver.tick())) == 2  # both first starts left the period
    assert admin(driver, "overview")["rate_limited_queues"] == {
        "default": {"starts": 2, "period_ms": 1_000}}
    fresh = replayed(driver)
    assert fresh.rates.limits == {"default": (2, 1_000)}
    out = driver.run(c.Admin("p", driver.rid(), "limit_queue",
                             {"queue": "default", "starts": None, "period_ms": None}))
    assert len(executes(out)) == 1 and driver.engine.next_wakeup() != driver.mono + 1_000
    assert replayed(driver).rates.limits == {}
    assert reply(out).fields["queue"]["rate_limit"] is None


@pytest.mark.parametrize("body", [{"queue": "q"}, {"queue": "q", "starts": 1},
                                  {"queue": "q", "starts": 1, "period_ms": None},
                                  {"queue": "q", "starts": 0, "period_ms": 1},
                                  {"queue": "q", "starts": 10_001, "period_ms": 1},
                                  {"queue": "q", "starts": 1, "period_ms": 86_400_001},
                                  {"queue": "q", "starts": "1", "period_ms": 1},
                                  {"queue": "", "starts": 1, "period_ms": 1}])
def test_limit_queue_refuses_a_bad_request(body):
    assert refused(Driver(), "limit_queue", **body) == "invalid_request"


def test_delete_job_removes_a_finished_job_and_frees_its_id():
    """Completed, discarded and cancelled jobs are deleted (packed ones too), with their
    charge and counts; a job that is not finished is refused and stays; a volatile one
    leaves no record; a replay holds the same jobs; the id is free for a new job."""
    driver = Driver()
    driver.engine.start_packing()
    driver.worker(capacity=10)
    empty = driver.engine.budget.used
    (done,) = executes(driver.enqueue(args={"n": 1}))
    driver.succeed(done)
    (failed,) = executes(driver.enqueue(retries=0))
    driver.fail(failed)
    driver.engine.pack_finished(1000)
    driver.engine.pack_finished(1000)
    assert bytes.fromhex(done.job_id) in driver.engine.finished.packed
    admin(driver, "pause_queue", queue="default")
    waiting = driver.job_id()
    assert refused(driver, "delete_job", job_id=waiting) == "delete_rejected"
    assert refused(driver, "delete_job", job_id="0" * 31 + "9") == "not_found"
    cancelled = admin(driver, "cancel_job", job_id=waiting)["job"]["id"]
    for job_id, state in ((done.job_id, "completed"), (failed.job_id, "discarded"),
                          (cancelled, "cancelled")):
        out = driver.run(c.Admin("p", driver.rid(), "delete_job", {"job_id": job_id}))
        fields = reply(out).fields
        assert fields["deleted"] is True and fields["job"]["state"] == state
        assert [event.name for _, event in out.events] == ["job_deleted"]
        assert refusal(driver.run(c.Status("p", driver.rid(), job_id)))["code"] == "not_found"
    assert driver.engine.job_count() == 0 and driver.engine.budget.used == empty
    assert admin(driver, "jobs")["jobs"] == []
    assert dict(driver.engine.counts) == {state: 0 for state in driver.engine.counts}
    fresh = replayed(driver)
    assert fresh.job_count() == 0
    again = driver.job_id(args={"n": 2}, id=done.job_id)  # a new job under the old id
    assert again == done.job_id and driver.status(again)["state"] == "available"
    assert replayed(driver).job(bytes.fromhex(again)).state == "available"
    admin(driver, "resume_queue", queue="default")
    (volatile,) = executes(driver.enqueue(durability="volatile"))
    driver.succeed(volatile)
    out = driver.run(c.Admin("p", driver.rid(), "delete_job", {"job_id": volatile.job_id}))
    assert reply(out).fields["deleted"] is True and out.events == []


def test_delete_jobs_deletes_one_finished_state_in_batches():
    driver = Driver()
    driver.worker(capacity=20)
    mail = [e.job_id for n in range(5) for e in executes(driver.enqueue(queue="mail"))]
    other = [e.job_id for n in range(2) for e in executes(driver.enqueue(queue="other"))]
    for job_id in mail + other:
        (reservation,) = [r for r in driver.engine.executors.reservations.values()
                          if r.job_id.hex() == job_id]
        driver.run(c.Succeeded(reservation.conn, driver.rid(), reservation.reservation_id,
                               reservation.execution_id, None))
    deleted, cursor, batches = 0, None, 0
    while True:
        fields = admin(driver, "delete_jobs", state="completed", queue="mail", limit=2,
                       **({"cursor": cursor} if cursor else {}))
        deleted += fields["deleted"]
        batches += 1
        if (cursor := fields["next_cursor"]) is None:
            break
    # at least 3 batches of 2; a batch may end early at the entries the deleted jobs left
    # in the index, its cursor going on from there
    assert deleted == 5 and batches >= 3
    assert {driver.status(job_id)["state"] for job_id in other} == {"completed"}
    assert replayed(driver).job_count() == 2
    for body in ({}, {"state": "available"}, {"state": "completed", "limit": 0}):
        assert refused(driver, "delete_jobs", **body) == "invalid_request"



def test_a_bulk_deletion_of_packed_jobs_builds_none_and_writes_what_the_general_way_writes(
        monkeypatch):
    """``delete_jobs`` deletes a Store-v2 job held finished without an entry (here packed by
    a running server; tests/storage/test_base_columns.py: in columns after a recovery) as
    it is held: none is built, and the records, replies and engine state are the ones the
    general way (each job taken out, then deleted) gives."""
    from tay.engine.epoch import EpochEngine
    from tests.engine.test_lazy_rows import bookkeeping
    from tests.engine.test_tail_columns import journal_frames, tail_driver

    def run(general: bool):
        driver = tail_driver(5, [("enqueue", "a", None, {}), ("finish", 0, "nil"),
                                 ("enqueue", "a", None, {}, 0), ("finish", 0, "failed")] * 3)
        engine = driver.engine
        engine.start_packing()
        engine.pack_finished(1000)  # the round's jobs: those retained now
        while engine.pack_finished(1000):
            pass
        assert len(engine.finished.packed) == 6 and not engine.jobs
        built: list = []
        thaw = EpochEngine._thaw
        monkeypatch.setattr(EpochEngine, "_thaw",
                            lambda self, job_id: built.append(job_id) or thaw(self, job_id))
        if general:
            monkeypatch.setattr(EpochEngine, "commit_held_deletion", lambda self, event, out:
                                self._commit(self._entry(event.payload["job_id"]), event,
                                             False, out))
        replies = [driver.run(c.Admin("p", f"d{n}", "delete_jobs",
                                      {"state": state, "limit": 2})).effects
                   for n, state in enumerate(("completed", "discarded", "completed"))]
        monkeypatch.undo()
        return journal_frames(driver), bookkeeping(engine), replies, built, engine.job_count()

    frames, kept, replies, built, left = run(general=False)
    assert built == [] and left == 1  # one discarded job left: pages of two
    assert [payload[:2] for _, _, payload in frames[-5:]] == [b"\x1d\x02"] * 5
    general = run(general=True)
    assert general[3] and general[:3] == (frames, kept, replies)
