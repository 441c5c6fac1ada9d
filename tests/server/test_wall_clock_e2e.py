"""A real ``tay serve`` whose wall clock moves while it runs (Debian's libfaketime).

A daemon lives through clock steps (NTP, an operator, a resumed host) and through the
passing of days. Delayed jobs, cron schedules and terminal retention are judged on the
wall clock; timers wait on the monotonic one. These tests step the server's wall clock
alone (``tests.wall_clock``) and watch what a worker runs, what a compaction expires and
what a restart recovers, through the real socket and the real store (strict sync).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import pytest

from tests.conformance.harness import REPO, Server, wait_for_lines
from tests.wall_clock import WallClock

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

HOUR_S = 3600


def started(*extra: str) -> tuple[Server, WallClock]:
    server = Server(*extra, durability="sync")
    clock = WallClock(server.root)
    server.env = clock.env()
    return server.start(), clock


def admin(server: Server, *args: str) -> dict:
    """``tay ARGS --json`` against the server's socket (a real process, real time)."""
    done = subprocess.run([sys.executable, "-m", "tay.cli", *args, "--socket", server.socket,
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + "\n--- server log ---\n" + server.log()
    return json.loads(done.stdout)


def wait_for_state(server: Server, job_id: str, state: str, limit_s: float = 15) -> dict:
    deadline = time.monotonic() + limit_s
    while True:
        job = admin(server, "job", job_id)["job"]
        if job["state"] == state or time.monotonic() > deadline:
            assert job["state"] == state, job
            return job
        time.sleep(0.05)


def test_a_delayed_job_runs_once_the_wall_clock_steps_past_it() -> None:
    """The server is idle between the enqueue and the step: nothing but its own timer can
    notice that the job fell due an hour early in monotonic time."""
    server, clock = started()
    try:
        server.start_worker()
        job_id = server.client("""
            job = await tay.enqueue("demo.sleep.v1", {"seconds": 0, "key": "late"},
                                    delay=HOUR_S)
            return job.id
        """.replace("HOUR_S", str(HOUR_S)))
        time.sleep(0.5)
        assert wait_for_lines(server.root / "late", 1, limit_s=0.1) == 0  # an hour to go
        clock.step(HOUR_S + 1)
        assert wait_for_lines(server.root / "late", 1, limit_s=10) == 1, server.log()
        job = wait_for_state(server, job_id, "completed")
        # it ran on the stepped clock, past the time it was asked for
        assert job["requested_at"] == job["inserted_at"] + HOUR_S * 1000, job
        assert job["requested_at"] <= job["attempted_at"] < job["requested_at"] + 10_000, job
    finally:
        server.close()


def missing(server: Server, job_id: str) -> str:
    """What ``tay job`` says of a job the engine does not hold (it exits non-zero)."""
    done = subprocess.run([sys.executable, "-m", "tay.cli", "job", job_id, "--socket",
                           server.socket, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr + done.stdout


ENQUEUE_ADDS = """
    jobs = [await tay.enqueue("demo.add.v1", {"left": n, "right": 1}) for n in range(COUNT)]
    return [job.id for job in jobs]
"""


def completed(server: Server, count: int) -> list[str]:
    """``count`` jobs enqueued and completed; their ids."""
    ids = server.client(ENQUEUE_ADDS.replace("COUNT", str(count)))
    for n, job_id in enumerate(ids):
        assert wait_for_state(server, job_id, "completed")["result"] == {"sum": n + 1}
    return ids


def test_retention_expires_what_the_stepped_clock_aged_and_a_restart_keeps_it_so() -> None:
    """Terminal retention is judged on the wall clock at the compaction: jobs that finished
    before a two-hour step are expired, the ones after it kept, and a restart recovers
    exactly that. Two hours more (across the restart) and the rest go too."""
    server, clock = started("--terminal-retention", "1h")
    try:
        server.start_worker()
        old = completed(server, 5)
        clock.step(2 * HOUR_S)  # the five finished two hours ago now
        new = completed(server, 2)
        report = admin(server, "compact")
        assert (report["expired_jobs"], report["retained_jobs"]) == (5, 2), report
        assert report["bytes_after"] < report["bytes_before"], report

        def holds_only(kept: list[str], gone: list[str]) -> None:
            for job_id in gone:
                assert "not found" in missing(server, job_id)
            for n, job_id in enumerate(kept):
                assert admin(server, "job", job_id)["job"]["result"] == {"sum": n + 1}
            assert admin(server, "status")["engine"]["jobs"]["total"] == len(kept)

        holds_only(new, old)
        server.stop()
        server.start()  # the clock file still says +2 h: the same two jobs, no more
        holds_only(new, old)
        server.stop()
        clock.step(2 * HOUR_S)
        server.start()
        holds_only(new, old)  # nothing expires without a compaction
        report = admin(server, "compact")
        assert (report["expired_jobs"], report["retained_jobs"]) == (2, 0), report
        holds_only([], old + new)
        server.stop()
        server.start()
        holds_only([], old + new)
    finally:
        server.close()


FIVE_MINUTES_MS = 300_000


def occurrence_id(schedule_id: str, due: int) -> str:
    """The job id an occurrence is enqueued with (spec/protocol.md 4.5)."""
    digest = hashlib.sha256(f"tay-schedule-occurrence-v1:{schedule_id}:{due}".encode()).digest()
    return digest[:16].hex()


def schedule_jobs(server: Server, schedule_id: str) -> set[str]:
    page = admin(server, "jobs", "--limit", "100")
    assert page["next_cursor"] is None
    return {job["id"] for job in page["jobs"] if job["schedule_id"] == schedule_id}


def runs(server: Server, schedule_id: str) -> int:
    """How many of the schedule's jobs the worker started (one line each, in a file)."""
    return wait_for_lines(server.root / schedule_id, 0, limit_s=0)


def test_cron_schedules_catch_up_after_the_wall_clock_steps_and_across_a_restart() -> None:
    """``*/5 * * * *`` with ``catch_up=all`` delivers every five-minute mark the clock
    stepped over, each once (ids are the occurrences'); ``latest`` delivers the one due and
    coalesces the rest. The same when the marks pass while the server is down."""
    server, clock = started()
    try:
        server.start_worker()
        # the first mark ten minutes or more ahead: nothing is delivered before the step
        # (one in the current minute would be delivered at once, racing the reads below)
        first = (clock.now_ms() // FIVE_MINUTES_MS + 3) * FIVE_MINUTES_MS
        server.client("""
            for catch_up in ("all", "latest"):
                await tay.schedule("demo.sleep.v1", cron="*/5 * * * *",
                                   kwargs={"seconds": 0, "key": catch_up},
                                   declaration_id=catch_up, catch_up=catch_up, overlap="allow",
                                   start_at=FIRST)
            return None
        """.replace("FIRST", str(first)))
        delivered: dict[str, list[int]] = {"all": [], "latest": []}  # occurrences so far
        for schedule_id in delivered:
            schedule = admin(server, "schedule", "show", schedule_id)["schedule"]
            assert (schedule["last_at"], schedule["next_at"]) == (None, first), schedule
        waiting = first

        def check(fake_now: int) -> None:
            every = admin(server, "schedule", "show", "all")["schedule"]
            latest = admin(server, "schedule", "show", "latest")["schedule"]
            last = every["last_at"]
            assert last <= fake_now < last + FIVE_MINUTES_MS + 3_000, (every, fake_now)
            assert every["next_at"] == last + FIVE_MINUTES_MS
            delivered["all"] += range(delivered["all"][-1] + FIVE_MINUTES_MS
                                      if delivered["all"] else first, last + 1, FIVE_MINUTES_MS)
            assert schedule_jobs(server, "all") == {
                occurrence_id("all", due) for due in delivered["all"]}
            assert latest["last_at"] == delivered["latest"][-1]
            assert latest["next_at"] > fake_now - 3_000 and latest["next_at"] % FIVE_MINUTES_MS == 0
            assert schedule_jobs(server, "latest") == {
                occurrence_id("latest", due) for due in delivered["latest"]}
            for job_id in schedule_jobs(server, "all") | schedule_jobs(server, "latest"):
                assert wait_for_state(server, job_id, "completed")["result"] == {"slept": 0}
            assert runs(server, "all") == len(delivered["all"])
            assert runs(server, "latest") == len(delivered["latest"])

        # to the middle of an interval, thirteen marks on (no mark passes while we look)
        half = FIVE_MINUTES_MS // 2
        clock.step((first + 12 * FIVE_MINUTES_MS + half - clock.now_ms()) // 1000)
        marks = 13
        # nothing asks the server meanwhile: idle, it must notice the step by itself
        assert wait_for_lines(server.root / "all", len(delivered["all"]) + marks) \
            >= len(delivered["all"]) + marks, server.log()
        assert wait_for_lines(server.root / "latest", len(delivered["latest"]) + 1) \
            == len(delivered["latest"]) + 1
        delivered["latest"].append(waiting)
        check(clock.now_ms())
        assert len(delivered["all"]) == 13
        waiting = admin(server, "schedule", "show", "latest")["schedule"]["next_at"]
        server.stop()
        # six marks more pass while the server is down
        clock.step((first + 18 * FIVE_MINUTES_MS + half - clock.now_ms()) // 1000)
        server.start()
        time.sleep(1)
        delivered["latest"].append(waiting)
        check(clock.now_ms())
        assert len(delivered["all"]) == 19
    finally:
        server.close()


def test_a_backward_step_keeps_serving_and_recovering_and_holds_delayed_jobs_to_their_time() -> None:
    """The wall clock steps an hour back (a corrected host clock): new jobs run, stamped
    earlier than the ones before them, the store recovers them all, and a job delayed to
    an instant the clock now has an hour to reach waits for it (``run_at`` is wall time)."""
    server, clock = started()
    try:
        server.start_worker()
        before = completed(server, 2)
        delayed = server.client("""
            jobs = [await tay.enqueue("demo.sleep.v1", {"seconds": 0, "key": "delayed"},
                                      delay=5) for _ in range(3)]
            return [job.id for job in jobs]
        """)
        due_by = time.monotonic() + 5  # enqueued before the client returned
        clock.step(-HOUR_S)  # at once: well before the five seconds pass
        after = completed(server, 2)
        stamps = [admin(server, "job", job_id)["job"]["inserted_at"] for job_id in before + after]
        assert max(stamps[2:]) < min(stamps[:2]) - (HOUR_S - 60) * 1000, stamps
        # the delay passes on the monotonic clock, not on the wall clock
        time.sleep(max(0.0, due_by + 1 - time.monotonic()))
        assert not (server.root / "delayed").exists()
        server.stop()
        server.start()
        for job_id in before + after:
            assert admin(server, "job", job_id)["job"]["state"] == "completed"
        for job_id in delayed:
            assert admin(server, "job", job_id)["job"]["state"] == "scheduled"
        clock.step(HOUR_S)
        assert wait_for_lines(server.root / "delayed", 3, limit_s=10) == 3, server.log()
        for job_id in delayed:
            assert wait_for_state(server, job_id, "completed")["result"] == {"slept": 0}
    finally:
        server.close()


def test_a_quiet_engine_compacts_by_itself_once_finished_jobs_outlived_their_retention() -> None:
    """Neither size nor state calls for a compaction here; the retention trigger does once
    the oldest finished job is past its retention (1 h) by the slack (at least 1 h)."""
    server, clock = started("--terminal-retention", "1h")
    try:
        server.start_worker()
        done = completed(server, 4)
        clock.step(2 * HOUR_S - 60)  # a minute short of retention and slack
        time.sleep(5)  # the trigger is looked at every 2 s
        assert admin(server, "status")["storage"]["last_compaction"] is None
        clock.step(120)
        deadline = time.monotonic() + 15
        while (last := admin(server, "status")["storage"]["last_compaction"]) is None:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.2)
        assert last["trigger"] == "retention", last
        assert (last["expired_jobs"], last["retained_jobs"]) == (4, 0), last
        for job_id in done:
            assert "not found" in missing(server, job_id)
    finally:
        server.close()
