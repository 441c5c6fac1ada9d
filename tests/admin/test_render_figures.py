"""How `tay status` shows the processes, `tay queues` the queues' latency, `tay workers` an
engine without executors and `tay tasks` the run times."""

from __future__ import annotations

from tay.admin.render import (latency, period, rate, render_queues, render_status, render_tasks,
                              render_workers)

PROCESS = {"pid": 4242, "rss_bytes": 55 * 2**20, "peak_rss_bytes": 60 * 2**20,
           "vms_bytes": 900 * 2**20, "cpu_user_s": 12.25, "cpu_system_s": 3.5,
           "threads": 4, "open_fds": 17, "max_fds": 1024}


def status(**storage_extra) -> dict:
    return {"tay_version": "0.1.0", "started_at": 1_700_000_000_000, "uptime_s": 60.0,
            "durability": "sync", "data_dir": "/var/lib/tay",
            "writer": {"running": True, "error": None},
            "storage": {"store_bytes": 2048, "files": 3, "free_bytes": 2**30, **storage_extra},
            "commit": {"events": 9, "batches": 3, "fsyncs": 3}, "engine": None,
            "process": PROCESS}


def test_the_status_names_the_server_process_and_a_running_compaction():
    text = render_status(status())
    assert ("pid 4242, 55.0 MiB resident (peak 60.0 MiB), 12.2 s user + 3.5 s system CPU, "
            "4 threads, 17 of 1024 file descriptors") in text
    assert "compacting" not in text
    running = {"pid": 4343, "rss_bytes": 80 * 2**20, "unique_bytes": 20 * 2**20,
               "cpu_user_s": 1.0, "cpu_system_s": 0.25}
    text = render_status(status(compaction={"process": running}))
    assert ("process 4343: 20.0 MiB of its own (80.0 MiB resident), 1.0 s user + 0.2 s "
            "system CPU") in text
    older = status()
    del older["process"]  # a server from before these figures still renders
    assert "pid" not in render_status(older)


def test_a_queue_latency_reads_in_the_unit_that_fits():
    assert latency({"oldest_ready_at": None, "latency_ms": 0}) == "-"
    assert latency({"oldest_ready_at": 1, "latency_ms": 250}) == "0.2 s"
    assert latency({"oldest_ready_at": 1, "latency_ms": 90_000}) == "1.5 min"
    assert latency({"oldest_ready_at": 1, "latency_ms": 2 * 3_600_000}) == "2.0 h"
    assert latency({}) == "-"  # an older server's row
    counts = {"retryable": 0, "completed": 5, "discarded": 0, "cancelled": 0}
    table = render_queues({"queues": [
        {"name": "mail", "paused": False, "credits": 10, "executing": 0, "waiting": 2,
         "by_state": counts, "oldest_ready_at": 1, "latency_ms": 4_000}]})
    header, line = table.splitlines()[:2]
    assert header.split()[7] == "LATENCY" and line.split()[6:8] == ["4.0", "s"]


def test_a_rate_limit_reads_as_tay_limit_takes_it():
    assert rate({}) == rate({"rate_limit": None}) == "-"
    limited = {"rate_limit": {"starts": 10, "period_ms": 1_000}, "rate_limited_until": None}
    assert rate(limited) == "10/1s"
    assert rate({**limited, "rate_limited_until": 5}) == "10/1s (holding)"
    assert [period(ms) for ms in (1_500, 90_000, 120_000, 7_200_000, 1)] == \
        ["1500ms", "90s", "2m", "2h", "1ms"]


def test_workers_without_an_executor_say_so_instead_of_an_empty_table():
    text = render_workers({"workers": [{"mode": "client"}], "unserved": []}, 0)
    assert text.startswith("no executor is connected: jobs wait until a worker connects\n")
    assert "1 producer connection(s) on the socket (this command's own" in text
    assert "RUNTIME ID" not in text


def test_tasks_read_their_run_time_quantiles_as_bucket_bounds():
    row = {"queue": "mail", "task": "send", "enqueued": 9, "completed": 7, "failed": 1,
           "timed_out": 1, "discarded": 1, "retried": 2, "cancelled": 0, "runs": 9,
           "run_ms_mean": 1_500, "run_ms_p50": 250, "run_ms_p95": 5_000, "run_ms_p99": None,
           "executors": 2}
    idle = {**row, "task": "idle", "runs": 0, "run_ms_mean": None, "run_ms_p50": None,
            "run_ms_p95": None, "run_ms_p99": None, "executors": 0}
    lines = render_tasks({"tasks": [row, idle], "more": True}).splitlines()
    assert lines[1].split() == ["mail", "send", "9", "7", "3", "2", "0", "1.5", "s", "<=",
                                "250", "ms", "<=", "5.0", "s", "longer", "2"]
    assert lines[2].split()[-5:] == ["-", "-", "-", "-", "0"]
    assert lines[3] == "more (queue, task) pairs: --limit up to 1000"


def test_the_row_of_the_pairs_past_the_cap_is_named_others():
    row = {"queue": "", "task": "", "enqueued": 4, "completed": 4, "failed": 0,
           "timed_out": 0, "discarded": 0, "retried": 0, "cancelled": 0, "runs": 0,
           "run_ms_mean": None, "run_ms_p50": None, "run_ms_p95": None, "run_ms_p99": None,
           "executors": 0}
    lines = render_tasks({"tasks": [row], "more": False, "pairs_max": 4096}).splitlines()
    assert lines[1].split()[:3] == ["(others)", "(others)", "4"]
    assert lines[2] == "(others): the pairs first counted after the first 4,096, together"
