"""benchmarks/soak_daemon.py on a short run: three simulated days of a real ``tay serve``
whose wall clock runs 43,200 times faster (libfaketime). Jobs expire by the compactions
serve triggers itself, an operator deletes the completed ones by hand, the hourly
schedule runs once an hour of the clock, and the store restarts cold."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from tests.scratch import scratch_dir
from tests.wall_clock import library

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_three_simulated_days_expire_compact_deliver_hourly_and_restart(capsys) -> None:
    library()  # skipped, and said so at the end, without Debian's faketime
    from benchmarks import soak_daemon

    scratch = scratch_dir("soak-daemon-")  # accepted by strict sync wherever the checkout is
    deep = scratch / ("d" * 60)  # the socket must not follow the store (100 bytes at most)
    result = soak_daemon.main([
        "--days", "3", "--speed", "43200", "--rate", "40", "--retention", "1h",
        "--history-bytes", "65536", "--restarts", "1", "--operator-every", "1",
        "--dir", str(deep)])
    rows, summary = result["rows"], result["summary"]
    assert [row["day"] for row in rows] == [1, 2, 3]
    last = rows[-1]
    assert last["acked"] >= 200 and last["compactions"] >= 1
    assert last["retained"] < last["acked"] // 2  # the compactions expired finished jobs
    # what they cost, from status: their processes' CPU and the last one's peak
    assert last["compaction_cpu_s"] > 0 and last["compaction_peak_rss_bytes"] > 0
    assert last["peak_rss_bytes"] >= last["rss_bytes"] > 0
    # an occurrence each simulated hour (the first one read a few simulated minutes late at
    # most), each run once (catch_up=all, overlap=allow), and the engine delivered them
    # whatever its timer's monotonic mapping said (it reads the wall clock once a second)
    due = summary["occurrences_due"]
    assert due >= summary["simulated_hours"] - 14
    assert due - 1 <= summary["occurrences_run"] <= due
    assert len(summary["cold_restart_s"]) == 1
    # an operator cleared the completed jobs by hand once a real second, and the day
    # history still counts every job run, the same after a restart
    assert summary["deleted_by_hand"] > 0 and rows[-1]["deleted"] <= summary["deleted_by_hand"]
    assert summary["history_totals"]["completed"] >= summary["deleted_by_hand"]
    assert summary["history_same_after_restart"]
    assert "cold restarts" in capsys.readouterr().out
    assert os.listdir(deep) == []  # the store was removed afterwards
    os.rmdir(deep)
    os.rmdir(scratch)


# killed at once: while it starts or as the clients connect; half a second in: while they run
@pytest.mark.parametrize("serving_s", [0.0, 0.5])
def test_a_run_whose_server_dies_keeps_the_store_and_says_how_it_ended(
        capsys, serving_s: float) -> None:
    library()
    import psutil

    from benchmarks import soak_daemon

    scratch = scratch_dir("soak-daemon-")
    killed: list[int] = []

    def kill_the_server() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for child in psutil.Process().children(recursive=True):
                try:
                    if "serve" in child.cmdline():
                        time.sleep(serving_s)
                        child.kill()
                        killed.append(child.pid)
                        return
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_server)
    killer.start()
    try:
        with pytest.raises(RuntimeError, match="killed by signal 9|tay status failed"):
            soak_daemon.main(["--days", "3", "--speed", "43200", "--rate", "40",
                              "--restarts", "1", "--dir", str(scratch)])
    finally:
        killer.join()
    assert killed
    err = capsys.readouterr().err
    assert "tay serve was killed by signal 9 (SIGKILL)" in err
    (kept,) = scratch.iterdir()  # the store and its log stay for a look
    assert f"kept in {kept}" in err
    served = (kept / "server.log").read_text().count("tay serving")
    assert served == 1 if serving_s else served <= 1  # at once: it may not have served yet
    assert (kept / "data").is_dir() or not served
    shutil.rmtree(scratch)


def test_the_occurrences_due_follow_the_schedule_not_the_hour() -> None:
    from benchmarks.soak_daemon import occurrences_between

    hour, start = 3_600_000, 1_767_225_600_000  # 2026-01-01T00:00Z, on the hour
    assert occurrences_between("0 * * * *", start, start + 5 * hour) == 6  # both ends count
    assert occurrences_between("* * * * *", start, start + hour) == 61
    assert occurrences_between("*/15 * * * *", start, start + hour - 1) == 4
    assert occurrences_between("0 * * * *", start, None) == 0  # nothing was delivered


def test_two_histories_agree_on_the_days_both_hold_and_on_quiet_ones() -> None:
    from benchmarks.soak_daemon import same_days

    def day(n: int, enqueued: int = 0) -> dict:
        return {"day": n * 86_400_000, "enqueued": enqueued, "completed": enqueued,
                "failed": 0}

    before = [day(1), day(2, 40), day(3, 7)]
    assert same_days(before, before)
    assert same_days(before, [day(2, 40), day(3, 7), day(4)])  # the clock moved on a day
    assert not same_days(before, [day(2, 40), day(3, 6), day(4)])  # a day counts less
    assert not same_days(before, [day(3, 7), day(4), day(5)])  # a counted day left the window
    assert not same_days(before, [day(2, 40), day(3, 7), day(4, 1)])


def test_a_negative_operator_interval_is_refused(capsys) -> None:
    from benchmarks import soak_daemon

    with pytest.raises(SystemExit):
        soak_daemon.main(["--operator-every", "-1"])
    assert "--operator-every must be 0" in capsys.readouterr().err
