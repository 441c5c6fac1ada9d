"""Start and stop a real ``tay serve`` subprocess for end-to-end SDK tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from tests.scratch import scratch_root

REPO = Path(__file__).resolve().parents[2]


class Server:
    """``tay serve`` in write-durability mode on a private socket and data dir."""

    def __init__(self, data_dir: str, socket_path: str, *extra: str) -> None:
        self.data_dir = data_dir
        self.socket_path = socket_path
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(os.path.dirname(data_dir), "serve.log")

    def start(self, timeout: float = 15) -> Server:
        command = [sys.executable, "-m", "tay.cli", "serve", "--data-dir", self.data_dir, "--socket",
                   self.socket_path, "--init-if-missing", "--durability", "write", *self.extra]
        self._log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()  # a server that did not come up in time is not left running
                self.process.wait()
                raise RuntimeError(f"tay serve did not start: {self.log()}")
            time.sleep(0.02)
        return self

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace") if os.path.exists(self.log_path) else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:  # draining running executions: stop now
                self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if hasattr(self, "_log"):
            self._log.close()


def scratch_dirs() -> tuple[tempfile.TemporaryDirectory[str], tempfile.TemporaryDirectory[str]]:
    """A data dir strict sync accepts (``tests.scratch``) and a short socket dir under /tmp."""
    return (tempfile.TemporaryDirectory(prefix="sdk-e2e-", dir=scratch_root()),
            tempfile.TemporaryDirectory(prefix="tsdk-", dir="/tmp"))


def stop_now(process) -> None:
    """SIGTERM drains running executions (up to --drain-timeout); a second one stops now."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def http_url(server: Server, timeout: float = 15.0) -> str:
    """The ``http://127.0.0.1:PORT`` a server started with ``--http-port 0`` listens on."""
    import re

    deadline = time.monotonic() + timeout
    while not (found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", server.log())):
        if time.monotonic() > deadline:
            raise RuntimeError("no HTTP listening line:\n" + server.log())
        time.sleep(0.02)
    return found.group(1)
