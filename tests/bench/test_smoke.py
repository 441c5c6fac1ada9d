"""`tay bench tiny` end to end: a real tay serve, worker and producer processes, the
journal read back offline, a cold restart, and the three report files."""

from __future__ import annotations

import json
import os

import pytest

from tay.cli import main


@pytest.mark.parametrize("client", ["ours", "tay-client"])
def test_tay_bench_tiny_profile_end_to_end(tmp_path, capsys, client):
    code = main(["bench", "tiny", "--dir", str(tmp_path), "--no-progress", "--client", client,
                 "--restarts", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("| Figure | per-event | group-commit |")
    [result_path] = [p for p in os.listdir(tmp_path) if p.endswith(".json")]
    document = json.loads((tmp_path / result_path).read_text())
    assert document["machine"]["nproc"] == os.cpu_count()
    per_event, grouped = document["runs"]
    for run in (per_event, grouped):
        assert run["completed"] == 50
        assert {s: n for s, n in run["job_states"].items() if n} == {"completed": 50}
        assert run["events"] == 150
        assert run["events_by_name"]["job_inserted"] == 50
        assert run["insert_rtt_ms"]["count"] == 50
        assert 0 < run["insert_rtt_ms"]["p50"] <= run["insert_rtt_ms"]["max"]
        assert run["jobs_per_s"] > 0 and run["history_bytes"] > 50 * 1024
        # when the producers were done (their own clock) and how many jobs had not run yet
        assert 0 < run["inserts_done_s"] < 60
        assert 0 <= run["backlog_at_inserts_done"] <= 50
        assert run["engine_max_rss_bytes"] > 1024 * 1024 and run["cold_restart_s"] > 0
        assert run["commit_stats"]["events"] >= 150
        assert run["server_exit_code"] == 0
        assert run["sdk"] == client and len(run["cold_restart_runs_s"]) == 2
        assert run["cold_restart_s"] == min(run["cold_restart_runs_s"])
        # the kernel counts CPU in 10 ms ticks: 50 jobs' load can take less than one tick,
        # the server's whole life (start-up, replay) never does
        assert run["engine_cpu_us_per_job"] > 0
        assert 0 <= run["load_cpu_us_per_job"] <= run["engine_cpu_us_per_job"]
        assert run["insert_rtt_ms"]["p99"] <= run["insert_rtt_ms"]["p999"]
        # a clean stop with --compact-on-stop on left a smaller history with the same jobs
        # (the harness refuses a compaction that changed any job's state)
        assert 0 < run["compacted_history_bytes"] < run["history_bytes"]
        assert run["compacting_stop_s"] > 0 and len(run["compacted_restart_runs_s"]) == 2
        assert run["compacted_restart_cpu_s"] == min(run["compacted_restart_cpu_runs_s"]) > 0
        # counted by perf when it is installed, else skipped with the reason, never guessed
        assert ("all" in run["load_syscalls"]) != ("skipped" in run["load_syscalls"])
        # the server's threads over the load, by role (tay.bench.threads)
        assert set(run["load_threads"]) == {"loop", "writer", "other"}
        assert set(run["threads_per_job"]) == {"loop", "writer", "other"}
    assert per_event["commit_stats"]["max_events"] == 1
    assert grouped["commit_stats"]["max_events"] == 64
    # write mode never fsyncs, and the run directories hold no store afterwards
    assert per_event["fsyncs"] == 0
    assert not any(os.path.exists(tmp_path / d / "data") for d in os.listdir(tmp_path))


def test_syscalls_off_leaves_perf_out_and_keeps_the_other_figures(tmp_path, capsys):
    code = main(["bench", "tiny", "--dir", str(tmp_path), "--no-progress", "--modes",
                 "group-commit", "--restarts", "1", "--compacted-restart", "off",
                 "--syscalls", "off"])
    out, err = capsys.readouterr()
    assert code == 0, err
    [result_path] = [p for p in os.listdir(tmp_path) if p.endswith(".json")]
    [run] = json.loads((tmp_path / result_path).read_text())["runs"]
    assert run["load_syscalls"] == {"skipped": "not counted (--syscalls off)"}
    assert run["syscalls_per_job"] is None and run["completed"] == 50
    assert set(run["threads_per_job"]) == {"loop", "writer", "other"}
    assert "| syscalls per job during load (futex, write) | skipped: not counted" in out
