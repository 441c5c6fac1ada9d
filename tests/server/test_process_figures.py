"""The process figures ``status`` and ``/metrics`` read (``tay.server.process_figures``),
checked against psutil's reading of the same processes."""

from __future__ import annotations

import os
import signal
import time

import psutil

from tay.server import process_figures


def test_the_server_figures_describe_this_process():
    ballast = bytearray(64 * 2**20)
    ballast[::4096] = b"\1" * len(ballast[::4096])  # resident, page by page
    me = process_figures.server()
    assert me["pid"] == os.getpid()
    assert me["peak_rss_bytes"] >= me["rss_bytes"] > 64 * 2**20
    assert me["vms_bytes"] >= me["rss_bytes"]
    assert me["threads"] >= 1 and me["open_fds"] >= 3
    assert me["cpu_user_s"] > 0 and me["cpu_system_s"] >= 0
    seen = psutil.Process()
    memory, cpu = seen.memory_info(), seen.cpu_times()
    assert abs(me["rss_bytes"] - memory.rss) < 2 * 2**20
    assert abs(me["vms_bytes"] - memory.vms) < 16 * 2**20
    assert me["threads"] == seen.num_threads()
    assert abs(me["open_fds"] - seen.num_fds()) <= 1  # psutil counts its listing's own
    assert me["cpu_user_s"] <= cpu.user + 0.05 and me["cpu_system_s"] <= cpu.system + 0.05
    assert me["cpu_user_s"] >= cpu.user - 1.0
    del ballast


def test_a_child_is_described_while_it_runs_and_not_once_it_exited():
    ballast = bytearray(32 * 2**20)
    ballast[::4096] = b"\1" * len(ballast[::4096])
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # touches 16 MiB of its own, shares the ballast
        own = bytearray(16 * 2**20)
        own[::4096] = b"\2" * len(own[::4096])
        os.write(ready_w, b"r")
        time.sleep(30)
        os._exit(0)
    try:
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"r"
        child = process_figures.compaction(pid)
        assert child["pid"] == pid
        # its own 16 MiB is unique; the ballast is resident but shared with this process
        assert 16 * 2**20 <= child["unique_bytes"] < child["rss_bytes"]
        assert child["rss_bytes"] > 48 * 2**20
        seen = psutil.Process(pid).memory_full_info()
        assert abs(child["rss_bytes"] - seen.rss) < 2**20
        assert abs(child["unique_bytes"] - seen.uss) < 2**20
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while process_figures.compaction(pid) is not None:  # a zombie until reaped
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        os.close(ready_r)
        _, _, usage = os.wait4(pid, 0)
    assert process_figures.compaction(pid) is None  # reaped
    used = process_figures.reaped(usage)
    assert used["peak_rss_bytes"] > 48 * 2**20
    assert used["cpu_user_s"] >= 0 and used["cpu_system_s"] >= 0
    assert process_figures.reaped(None) == {"cpu_user_s": None, "cpu_system_s": None,
                                            "peak_rss_bytes": None}
