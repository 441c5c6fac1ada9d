"""Every Python example of the docs runs as written (pasted into a file, nothing added)
against one real ``tay serve`` with both listeners (socket and HTTP), found through
``TAY_SOCKET_PATH`` and ``TAY_HTTP_URL``. An example is named ``<!-- example: NAME -->``
and checked here, so none can be added without a test; a block that only sketches an
internal API is marked ``<!-- sketch -->`` instead."""

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
README = (REPO / "README.md").read_text()
EXAMPLES = dict(EXAMPLE.findall(DOCS)) | {f"readme-{name}": code for name, code in EXAMPLE.findall(README)}
ALL_DOCS = {path.name: path.read_text() for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}


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


def environment(served: Server, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TAY_SOCKET_PATH": served.socket_path,
            "TAY_HTTP_URL": served.http_url, **extra}


def run_example(name: str, served: Server) -> subprocess.CompletedProcess[str]:
    return run_program(EXAMPLES[name], served)


def run_program(source: str, served: Server, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``source`` exactly as written, in a fresh interpreter using our SDK and this server."""
    completed = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout,
                               cwd=str(REPO), env=environment(served))
    assert completed.returncode == 0, completed.stderr + "\n--- server ---\n" + served.log()
    return completed


def test_every_python_block_is_a_named_example_or_a_marked_sketch():
    for name, text in ALL_DOCS.items():
        blocks = text.count("```python")
        examples = len(EXAMPLE.findall(text))
        sketches = text.count("<!-- sketch -->\n```python")
        assert blocks == examples + sketches, f"{name}: an unnamed python block"
        if name not in ("sdk.md", "README.md"):
            assert examples == 0, f"{name}: examples live in sdk.md and README.md (or add them here)"
    assert set(EXAMPLES) == {"producer-and-worker", "unknown-outcomes", "schedules", "tay-worker-module",
                             "sync-tay", "testing", "asgi-lifespan", "http", "readme-first-task"}


def test_the_readme_task_declaration_runs(served):
    assert run_example("readme-first-task", served).stdout == ""


def test_sync_tay_from_a_view(served):
    assert run_example("sync-tay", served).stdout.strip() == "available"


def test_testing_mode_example_runs_without_the_server(served):
    env = {key: value for key, value in environment(served).items() if not key.startswith("TAY_")}
    done = subprocess.run([sys.executable, "-c", EXAMPLES["testing"]], capture_output=True, text=True,
                          timeout=60, cwd=str(REPO), env={**env, "TAY_SOCKET_PATH": "/nonexistent/tay.sock"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'completed': 1}"


def test_producer_and_worker_prints_the_result(served):
    assert run_example("producer-and-worker", served).stdout.split("\n")[:2] == ["{'sum': 7}", "{'sum': 7}"]


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
    env = environment(served, PYTHONPATH=f"{REPO}{os.pathsep}{tmp_path}")  # the module relies on discovery
    worker = subprocess.Popen([sys.executable, *command.split()[1:]], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        producer = '''
import asyncio
from tay import Tay
async def main():
    async with Tay(mode="client") as tay:
        job = await tay.enqueue("images.resize.v1", {"path": "cat.png", "width": 320})
        print(await job.result(timeout=20))
asyncio.run(main())
'''
        assert run_program(producer, served, timeout=30).stdout.strip() == "cat.png@320w"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0, worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
