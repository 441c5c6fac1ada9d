"""``tay serve`` as a real subprocess for crash tests: start on a data dir, kill -9,
restart, and read the store offline (``tay storage inspect --json``, a content digest).

Data dirs live under ``tests.scratch`` because strict ``sync`` mode refuses /tmp.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tay.bench.server import socket_accepts
from tests.scratch import scratch_root
from tests.sdk.server import stop_now

REPO = Path(__file__).resolve().parents[2]
SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is
STRICT = ("--durability", "sync", "--validated-filesystem")


def serve_command(data_dir: Path, socket_path: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(data_dir),
            "--socket", socket_path, "--init-if-missing", *STRICT, *extra]


class ServerProcess:
    """One ``tay serve`` on ``data_dir``; ``start`` returns once the socket accepts."""

    def __init__(self, data_dir: Path, socket_path: str, log_path: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.socket_path = socket_path
        self.log_path = log_path
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    def spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                serve_command(self.data_dir, self.socket_path, *self.extra), cwd=REPO,
                stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)})
        return self.process

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        process = self.spawn()
        deadline = time.monotonic() + timeout
        while not socket_accepts(self.socket_path):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()  # a server that did not come up in time is not left running
                process.wait()
                raise RuntimeError("tay serve did not start:\n" + self.log())
            time.sleep(0.02)
        return self

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_now(self.process)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _tay_json(*args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    done = subprocess.run([sys.executable, "-m", "tay.cli", *args, "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return done, json.loads(done.stdout) if done.stdout.strip() else None


def inspect_store(data_dir: Path) -> dict:
    done, report = _tay_json("storage", "inspect", "--data-dir", str(data_dir))
    assert done.returncode == 0, (
        f"inspect exited {done.returncode}: stderr {done.stderr!r}, stdout {done.stdout[:4000]!r}")
    return report


def inspect_after_kill(data_dir: Path) -> dict:
    """``inspect_store`` of a store a kill -9 left. A kill while the journal writer is
    inside a ``pwrite`` that spans pages can leave the pages written so far (Linux checks
    for a fatal signal between the pages of a buffered write): recovery refuses that final
    record, never acknowledged, as a torn tail naming ``tay storage repair`` (the seeds rule
    out repairing it automatically; docs/journal.md, "Repair"), and the operator's repair
    is run here. It must remove exactly the torn bytes; any other refusal fails."""
    done, report = _tay_json("storage", "inspect", "--data-dir", str(data_dir))
    if done.returncode == 1 and report is not None and report.get("class") == "incomplete_tail":
        torn = os.path.getsize(report["path"]) - report["offset"]
        repaired, outcome = _tay_json("storage", "repair", "--data-dir", str(data_dir))
        assert repaired.returncode == 0 and outcome is not None and outcome["repaired"], (
            report, repaired.stdout, repaired.stderr)
        assert outcome["removed_bytes"] == torn > 0, (report, outcome)
        assert os.path.getsize(report["path"]) == report["offset"], (report, outcome)
        print(f"  the kill tore the final record ({report['reason']}, {torn} bytes at "
              f"{report['offset']} of {report['path']}): repaired")
        done, report = _tay_json("storage", "inspect", "--data-dir", str(data_dir))
    assert done.returncode == 0, (
        f"inspect exited {done.returncode}: stderr {done.stderr!r}, stdout {done.stdout[:4000]!r}")
    return report


def tree_digest(root: Path) -> str:
    """SHA-256 over every entry's relative path, mode and bytes (what "changed nothing" means)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        stat = path.lstat()
        digest.update(f"{stat.st_mode:o}:{stat.st_size}".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()
