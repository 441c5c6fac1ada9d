"""Benchmarks keep their stores and reports under the XDG data home, never under the
checkout: a clone in /tmp (which strict sync refuses) runs ``make bench`` too."""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest

from tay.bench.paths import bench_root, bench_scratch, data_home
from tay.cli import main
from tests.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("dashboard_render", "http_load", "replay", "schedules", "sdk_compare", "socket_rtt",
           "micro.test_journal_bench", "soak_online")


def test_the_xdg_rule_picks_the_directory():
    home = Path(os.path.expanduser("~"))
    assert data_home({}) == home / ".local" / "share"
    assert data_home({"XDG_DATA_HOME": ""}) == home / ".local" / "share"
    assert data_home({"XDG_DATA_HOME": "relative/share"}) == home / ".local" / "share"
    assert data_home({"XDG_DATA_HOME": "/srv/share"}) == Path("/srv/share")
    assert bench_root({"XDG_DATA_HOME": "/srv/share"}) == Path("/srv/share/tay/bench")
    assert bench_scratch({"XDG_DATA_HOME": "/srv/share"}) == Path("/srv/share/tay/bench/scratch")
    assert bench_root({"XDG_DATA_HOME": "/srv/share", "TAY_BENCH_DIR": "/data/b"}) == Path("/data/b")


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_scripts_keep_scratch_stores_outside_the_checkout(script):
    module = importlib.import_module(f"benchmarks.{script}")
    assert module.SCRATCH == bench_scratch()
    assert REPO not in module.SCRATCH.parents


def test_no_benchmark_defaults_to_a_directory_in_the_checkout():
    """A new script that reaches for ``REPO / ".tmp"`` or ``var/bench`` fails here."""
    offenders = []
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        text = path.read_text()
        if re.search(r"""(/ |["'])\.tmp["']|["']var["'], *["']bench["']|var/bench""", text):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_tay_bench_without_dir_runs_strict_sync_under_the_xdg_data_home(monkeypatch, capsys):
    xdg = scratch_dir("xdg-")  # accepted by strict sync wherever the checkout is
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg))
    monkeypatch.delenv("TAY_BENCH_DIR", raising=False)
    code = main(["bench", "tiny", "--durability", "sync", "--modes", "group-commit",
                 "--jobs", "20", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    out_dir = xdg / "tay" / "bench"
    [report] = [name for name in os.listdir(out_dir) if name.endswith(".json")]
    document = json.loads((out_dir / report).read_text())
    assert [(run["completed"], run["fsyncs"] > 0) for run in document["runs"]] == [(20, True)]
    assert f"json: {out_dir / report}" in err
