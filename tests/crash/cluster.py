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


def inspect_store(data_dir: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "tay.cli", "storage", "inspect",
                           "--data-dir", str(data_dir), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (
        f"inspect exited {done.returncode}: stderr {done.stderr!r}, stdout {done.stdout[:4000]!r}")
    return json.loads(done.stdout)


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
