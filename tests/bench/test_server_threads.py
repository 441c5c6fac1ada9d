"""The bench splits the server's CPU and context switches by thread (tay.bench.threads),
and counts the system calls the per-job path makes by kind (tay.bench.syscalls)."""

from __future__ import annotations

import os
import threading

from tay.bench.report import markdown_table
from tay.bench.syscalls import EVENTS, MORE_EVENTS, parse_counts
from tay.bench.threads import WRITER_THREAD, by_role, per_job, role, snapshot
from tests.bench.test_metrics_report import _run


def test_snapshot_of_this_process_has_every_live_thread() -> None:
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    try:
        threads = snapshot(os.getpid())
        assert os.getpid() in threads and helper.native_id in threads
        comm, user_s, system_s, voluntary, involuntary = threads[os.getpid()]
        assert comm and user_s >= 0 and system_s >= 0 and voluntary >= 0 and involuntary >= 0
        assert role(os.getpid(), helper.native_id, threads[helper.native_id][0]) == "other"
    finally:
        stop.set()
        helper.join()


def test_roles_sum_the_difference_over_the_load() -> None:
    pid = 100
    before = {100: ("python", 1.0, 0.5, 10, 2), 101: (WRITER_THREAD, 0.1, 2.0, 50, 1),
              102: ("helper", 0.0, 0.0, 0, 0)}
    after = {100: ("python", 3.0, 1.5, 30, 12), 101: (WRITER_THREAD, 0.3, 6.0, 150, 3),
             102: ("helper", 0.5, 0.0, 1, 0), 103: ("helper", 0.25, 0.25, 2, 2)}
    totals = by_role(pid, before, after)
    assert totals["loop"] == {"user_s": 2.0, "system_s": 1.0, "voluntary": 20,
                              "involuntary": 10}
    assert totals["writer"] == {"user_s": 0.2, "system_s": 4.0, "voluntary": 100,
                                "involuntary": 2}
    # a thread born during the load counts whole
    assert totals["other"] == {"user_s": 0.75, "system_s": 0.25, "voluntary": 3,
                               "involuntary": 2}
    assert per_job(totals, 1000)["writer"] == {"user_us": 200.0, "system_us": 4000.0,
                                               "switches": 0.1, "involuntary": 0.0}
    assert by_role(pid, before, {}) == {"skipped": "/proc/100/task is not readable"}
    assert per_job(by_role(pid, before, {}), 10) is None


def test_perf_counts_are_read_by_name_including_the_optional_events() -> None:
    events = {**EVENTS, **MORE_EVENTS}
    output = "\n".join([
        "123456,,raw_syscalls:sys_enter,1000,100.00,,",
        "2000,,syscalls:sys_enter_fdatasync,1000,100.00,,",
        "14000,,syscalls:sys_enter_newfstatat,1000,100.00,,",
        "<not counted>,,syscalls:sys_enter_writev,0,0.00,,"])
    assert parse_counts(output, events) == {"all": 123456, "fdatasync": 2000,
                                            "newfstatat": 14000}
    assert parse_counts("newfstatat,,x\nNo permission", events)["skipped"].startswith(
        "perf stat counted nothing")


def test_markdown_table_shows_syscalls_by_kind_and_the_threads() -> None:
    run = _run("per-event", 1000.0, 4)
    run["syscalls_per_job"] = {"all": 29.5, "futex": 1.1, "write": 3.6, "newfstatat": 14.0}
    run["threads_per_job"] = {
        "loop": {"user_us": 325.0, "system_us": 85.0, "switches": 3.33, "involuntary": 2.05},
        "writer": {"user_us": 11.0, "system_us": 291.0, "switches": 5.82, "involuntary": 0.35},
        "other": {"user_us": 0.0, "system_us": 0.0, "switches": 0.0, "involuntary": 0.0}}
    lines = markdown_table([run, _run("group-commit", 99.0, None)]).splitlines()
    assert "| syscalls per job by kind | futex 1.10, write 3.60, newfstatat 14.00 | - |" in lines
    assert any(line.startswith("| server threads per job over the load") and
               "| 325.0 / 85.0, 11.0 / 291.0; 3.33 (2.05) / 5.82 (0.35) | - |" in line
               for line in lines)


def test_the_default_count_leaves_the_by_kind_tracepoints_out(monkeypatch) -> None:
    """Every tracepoint slows the syscalls it sees: the default run counts the basic set,
    --syscalls by-kind adds the per-kind ones (where the kernel has them)."""
    from tay.bench import syscalls

    seen: list[list[str]] = []

    class Spawned:
        def __init__(self, argv, **_kwargs) -> None:
            seen.append(argv)

    monkeypatch.setattr(syscalls.shutil, "which", lambda name: "/usr/bin/perf")
    monkeypatch.setattr(syscalls.subprocess, "Popen", Spawned)
    monkeypatch.setattr(syscalls, "ATTACH_S", 0)
    monkeypatch.setattr(syscalls, "available_events", lambda: {**EVENTS, **MORE_EVENTS})
    basic = syscalls.SyscallCounter.attach(4242)
    by_kind = syscalls.SyscallCounter.attach(4242, by_kind=True)
    assert basic.events == EVENTS
    assert by_kind.events == {**EVENTS, **MORE_EVENTS}
    assert seen[0][seen[0].index("-e") + 1].split(",") == list(EVENTS)
    assert "syscalls:sys_enter_newfstatat" in seen[1][seen[1].index("-e") + 1].split(",")
