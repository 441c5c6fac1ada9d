"""Every Python example of docs/sdk.md runs, as written, against one real ``tay serve`` with
both listeners (socket and HTTP); each must be named ``<!-- example: NAME -->`` and be
checked here, so an example cannot be added without a test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from .server import REPO, Server, http_url, scratch_dirs

pytestmark = pytest.mark.slow

EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)
DOCS = (REPO / "docs" / "sdk.md").read_text()
EXAMPLES = dict(EXAMPLE.findall(DOCS))


@pytest.fixture(scope="module")
def served():
    data, sockets = scratch_dirs()
    with data, sockets:
        server = Server(os.path.join(data.name, "data"), os.path.join(sockets.name, "tay.sock"),
                        "--http-port", "0").start()
        try:
            server.http_url = http_url(server)
            yield server
        finally:
            server.stop()


def run_example(name: str, served: Server) -> subprocess.CompletedProcess[str]:
    return run_program(EXAMPLES[name], served)


def run_program(source: str, served: Server, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``source`` with the docs' placeholders defined, in a fresh interpreter using our SDK."""
    program = f"SOCKET_PATH = {served.socket_path!r}\nHTTP_URL = {served.http_url!r}\n" + source
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=timeout,
                               cwd=str(REPO), env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert completed.returncode == 0, completed.stderr + "\n--- server ---\n" + served.log()
    return completed


def test_every_python_block_is_a_named_example():
    assert DOCS.count("```python") == len(EXAMPLE.findall(DOCS)) == len(EXAMPLES)
    assert set(EXAMPLES) == {"producer-and-worker", "unknown-outcomes", "schedules",
                             "tay-worker-module", "asgi-lifespan", "http"}


def test_producer_and_worker_prints_the_result(served):
    assert run_example("producer-and-worker", served).stdout.strip() == "{'sum': 7}"


def test_retrying_with_a_submission_id_makes_one_job(served):
    assert run_example("unknown-outcomes", served).stdout.strip() == "True"


def test_schedules_example(served):
    lines = run_example("schedules", served).stdout.split()
    assert lines[0] == "nightly-report"
    assert lines[-3:] == ["2", "None", "True"]
    assert "nightly-report" in lines[1:3] and len(lines) == 6


def test_asgi_lifespan_starts_and_closes_the_client(served):
    assert run_example("asgi-lifespan", served).stdout.split() == ["True", "False"]


def test_http_producer_and_worker(served):
    assert run_example("http", served).stdout.strip() == "{'captured': 'inv-42'}"


def test_tay_worker_runs_the_documented_module_and_stops_on_sigterm(served, tmp_path):
    command = "python -m tay.worker myapp.jobs:tay --grace 30"
    assert command in DOCS
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(EXAMPLES["tay-worker-module"])
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "PATH": "/usr/bin:/bin",
           "TAY_SOCKET_PATH": served.socket_path}  # the module relies on discovery
    worker = subprocess.Popen([sys.executable, *command.split()[1:]], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        producer = '''
import asyncio
from tay import Tay
async def main():
    async with Tay(socket_path=SOCKET_PATH, mode="client") as tay:
        job = await tay.enqueue("images.resize.v1", {"path": "cat.png", "width": 320})
        while await job.status() != "completed":
            await asyncio.sleep(0.05)
        print(await job.result())
asyncio.run(main())
'''
        assert run_program(producer, served, timeout=30).stdout.strip() == "cat.png@320w"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0, worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
