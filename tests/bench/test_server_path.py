"""benchmarks.server_path runs the server's real path; with --metrics on it feeds the metrics."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import server_path
from tay.server import metrics as server_metrics


@pytest.mark.parametrize("reads", ["buffer", "frame"])
def test_metrics_on_observes_one_enqueue_ack_per_job(tmp_path, monkeypatch, reads):
    made = []
    real = server_metrics.ServerMetrics

    class Recording(real):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(server_metrics, "ServerMetrics", Recording)
    result = asyncio.run(server_path.run_round(str(tmp_path / "data"), 40, "group", "write",
                                               reads=reads, release="inline", metrics=True))
    assert result["fsyncs"] == 0  # --durability write
    (attached,) = made
    assert attached.enqueue_ack.count == 40
    assert attached.enqueue_ack.total > 0


def test_metrics_off_attaches_none(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(server_metrics, "ServerMetrics", lambda: made.append(1))
    asyncio.run(server_path.run_round(str(tmp_path / "data"), 20, "per-event", "write",
                                      release="inline"))
    assert made == []


def test_main_prints_the_metrics_setting(tmp_path, capsys):
    assert server_path.main(["--jobs", "20", "--rounds", "1", "--durability", "write",
                             "--metrics", "on", "--dir", str(tmp_path)]) == 0
    assert "metrics=on: server" in capsys.readouterr().out
