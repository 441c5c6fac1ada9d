"""Percentiles, profile validation and the report renderers."""

from __future__ import annotations

import json
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.bench.metrics import latency_summary_ms, percentile, rate
from tay.bench.profile import load_profile, profile_from_dict
from tay.bench.progress import ProgressBar
from tay.bench.report import markdown_table, write_all
from tay.failures import ConfigurationError


def test_nearest_rank_percentiles():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.50) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(values, 0.0) == 1.0


def test_percentile_refuses_empty_and_bad_fraction():
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1, max_size=200))
def test_summary_is_ordered_and_in_ms(sample):
    summary = latency_summary_ms(sample)
    assert summary["count"] == len(sample)
    assert summary["min"] <= summary["p50"] <= summary["p95"] <= summary["p99"] <= summary["max"]
    assert summary["max"] == pytest.approx(max(sample) * 1000, abs=1e-3)


def test_rate_refuses_a_non_positive_span():
    assert rate(300, 1.5) == 200.0
    with pytest.raises(ValueError):
        rate(1, 0.0)


def test_reference_profile_matches_the_spec():
    profile = load_profile("reference")
    assert (profile.jobs, profile.callers, profile.queues) == (10_000, 8, {"alpha": 2, "beta": 2})
    assert profile.expected_events == 30_000 and profile.retries == 0
    assert [profile.queue_for(i) for i in range(4)] == ["alpha", "beta", "alpha", "beta"]
    args = profile.job_args()
    assert args["account_key"] == "benchmark-account" and len(args["payload"]) == 1024


def test_profile_errors_name_the_file_and_field(tmp_path):
    base = {"name": "x", "jobs": 10, "callers": 2, "task": "t", "queues": {"a": 1},
            "payload_bytes": 1, "expected_events": 30}
    with pytest.raises(ConfigurationError, match="f.toml: jobs"):
        profile_from_dict({**base, "jobs": 0}, source="f.toml")
    with pytest.raises(ConfigurationError, match="f.toml: queues.a"):
        profile_from_dict({**base, "queues": {"a": "2"}}, source="f.toml")
    with pytest.raises(ConfigurationError, match="f.toml: task"):
        profile_from_dict({k: v for k, v in base.items() if k != "task"}, source="f.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ConfigurationError, match="bad.toml"):
        load_profile(str(bad))
    with pytest.raises(ConfigurationError, match="PROFILE"):
        load_profile("no-such-profile")


def _run(mode: str, jobs_per_s: float, fsyncs: int | None) -> dict:
    return {"mode": mode, "profile": "tiny", "group_commit": {"max_events": 1, "interval_ms": 0},
            "completed": 50, "jobs": 50, "jobs_per_s": jobs_per_s,
            "insert_rtt_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0, "max": 4.0},
            "events": 150, "expected_events": 150, "history_bytes": 1234, "segments": 1,
            "fsyncs": fsyncs,
            "commit_stats": {"largest_batch": 3, "gathered": 2} if fsyncs else None,
            "engine_max_rss_bytes": 30 * 1024 * 1024, "engine_cpu_user_s": 0.5,
            "engine_cpu_system_s": 0.1, "empty_startup_s": 0.2, "cold_restart_s": 0.25,
            "cold_restart_peak_rss_bytes": 31 * 1024 * 1024}


def test_markdown_table_has_one_column_per_run():
    table = markdown_table([_run("per-event", 1234.5, 100), _run("group-commit", 99.0, None)])
    lines = table.splitlines()
    assert lines[0] == "| Figure | per-event | group-commit |"
    assert "| completed jobs/s (first insert to last finish) | 1,234.5 | 99.0 |" in lines
    assert "| fsyncs (largest batch; batches that gathered) | 100 (3; 2) | - |" in lines
    assert all(line.count("|") == 4 for line in lines)


def test_markdown_table_shows_the_c_writers_time_per_batch():
    run = _run("per-event", 1000.0, 4)
    run["commit_stats"]["phases"] = {
        "batches": 4, "idle_ns": 400_000, "held_ns": 0, "queued_ns": 0, "take_ns": 0,
        "write_ns": 40_000, "verify_ns": 20_000, "sync_ns": 1_000_000, "check_ns": 60_000,
        "publish_ns": 24_000}
    lines = markdown_table([run, _run("group-commit", 99.0, None)]).splitlines()
    assert ("| writer per batch: idle / write / verify / fdatasync / path checks / publish (us)"
            " | 100.0 / 10.0 / 5.0 / 250.0 / 15.0 / 6.0 | - |") in lines


DOCUMENT = {"profile": "tiny", "machine": {"nproc": 2, "cpu_model": "cpu", "kernel": "6",
                                          "python": "3.11", "filesystem": "ext4"},
            "runs": [_run("per-event", 10.0, 30), _run("group-commit", 20.0, 12)]}


def test_write_all_writes_json_markdown_and_a_png_chart(tmp_path):
    """matplotlib is in the dev extra, so the chart branch always runs here."""
    written = write_all(DOCUMENT, str(tmp_path), "tiny-x")
    assert json.loads(open(written["json"]).read()) == DOCUMENT
    assert "2 CPUs, cpu, ext4" in open(written["markdown"]).read()
    assert "chart_note" not in written
    png = open(written["chart"], "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (990, 396)  # 9 x 3.6 inches at 110 dpi


def test_without_matplotlib_the_report_says_how_to_get_the_chart(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    written = write_all(DOCUMENT, str(tmp_path), "tiny-y")
    assert "chart" not in written and not (tmp_path / "tiny-y.png").exists()
    assert written["chart_note"] == ("chart skipped: matplotlib is not installed "
                                     "(pip install 'tay[bench]')")
    assert json.loads(open(written["json"]).read()) == DOCUMENT


def test_progress_bar_renders_counts(tmp_path):
    with open(tmp_path / "err", "w+") as stream:
        bar = ProgressBar("ref", 200, stream=stream, width=10)
        assert "[#####.....]     100/200" in bar.render(100)
        bar.finish(200)
        stream.seek(0)
        written = stream.read()
        assert "[##########]     200/200" in written and written.endswith("\n")


def test_the_report_names_the_tay_variables_the_server_inherited(tmp_path):
    from tay.bench.harness import server_environment

    assert server_environment({"TAY_JOURNAL_WRITER_RT_PRIORITY": "10", "HOME": "/root",
                               "TAY_BENCH_DIR": "/x", "TAY_COMPACTION": "off"}) == {
        "TAY_COMPACTION": "off", "TAY_JOURNAL_WRITER_RT_PRIORITY": "10"}
    document = {**DOCUMENT, "machine": {**DOCUMENT["machine"], "server_environment": {
        "TAY_JOURNAL_WRITER_RT_PRIORITY": "10"}}}
    written = write_all(document, str(tmp_path), "tiny-z")
    assert "Server environment: `TAY_JOURNAL_WRITER_RT_PRIORITY=10`" in \
        open(written["markdown"]).read()
    plain = write_all(DOCUMENT, str(tmp_path), "tiny-w")
    assert "Server environment" not in open(plain["markdown"]).read()
