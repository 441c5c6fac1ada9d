"""``python -m build`` gives an sdist that builds and an abi3 wheel; each installs into a
clean virtualenv outside the checkout and serves a job end to end.

Needs the package index for the build requirements and the runtime dependencies (CI has
PyPI). The wheel is built from the sdist, so a file missing from the sdist fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tests.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[1]
# What a build of the checkout must not see: local venvs, scratch stores, in-place builds.
LOCAL_ONLY = shutil.ignore_patterns(".git", ".venv*", ".tmp", "var", "build", "dist", "*.egg-info",
                                    "__pycache__", "*.so", "_tay_native.c", ".hypothesis", ".benchmarks")

ROUND_TRIP = textwrap.dedent('''
    import asyncio, sys
    from tay import Tay

    tay = Tay(socket_path=sys.argv[1])

    @tay.task(name="packaging.add.v1")
    def add(left: int, right: int) -> dict:
        return {"sum": left + right}

    async def main() -> None:
        async with tay:
            job = await add.enqueue(2, 5)
            print(await job.result(timeout=10))

    asyncio.run(main())
''')

pytestmark = pytest.mark.slow


def run(*command: str, cwd: str = "/", timeout: float = 300) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dists():
    with tempfile.TemporaryDirectory(prefix="tay-dist-") as work:
        source = Path(work) / "src"
        shutil.copytree(REPO, source, ignore=LOCAL_ONLY)
        run(sys.executable, "-m", "build", "--outdir", f"{work}/dist", str(source), timeout=600)
        (sdist,) = Path(work, "dist").glob("*.tar.gz")
        (wheel,) = Path(work, "dist").glob("*.whl")
        yield sdist, wheel


def test_the_sdist_carries_what_the_build_and_users_need(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"csrc/tay_native.h", "csrc/crc32c.c", "LICENSE", "tay/py.typed", "setup.py"} <= names


def test_the_wheel_is_abi3_typed_and_licensed(dists):
    _, wheel = dists
    assert "-cp311-abi3-" in wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read("tay-0.1.0.dist-info/METADATA").decode()
    assert "tay/py.typed" in names and any(n.endswith(".abi3.so") for n in names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if "psutil" in r and "extra ==" not in r]


def newer_python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine (pyenv's versions, then PATH), if any
    (a pyenv shim on PATH may exist and still refuse to run a version that is not selected)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(path) for path in sorted(pyenv.glob(f"{version}.*/bin/python{version}"),
                                               reverse=True)]
    candidates += [found] if (found := shutil.which(f"python{version}")) else []
    for candidate in candidates:
        if subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


NEWER = [pytest.param(version, marks=pytest.mark.skipif(
    newer_python(version) is None, reason=f"NOT TESTED: no python{version} on this machine"))
    for version in ("3.12", "3.13")]


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installs_into_a_clean_venv_and_serves(dists, kind):
    serves_from_a_clean_venv(dists[0] if kind == "sdist" else dists[1], sys.executable)


@pytest.mark.parametrize("version", NEWER)
def test_the_abi3_wheel_installs_and_serves_on_newer_pythons(dists, version):
    """One cp311-abi3 wheel for 3.11 and later (issue 14: 3.11-3.13)."""
    serves_from_a_clean_venv(dists[1], newer_python(version))


def serves_from_a_clean_venv(artifact: Path, python: str) -> None:
    with tempfile.TemporaryDirectory(prefix="tay-venv-") as venv, \
            tempfile.TemporaryDirectory(prefix="tpk-") as sockets:
        run(python, "-m", "venv", venv)
        run(f"{venv}/bin/python", "-m", "pip", "install", "--quiet", str(artifact), timeout=600)
        implementation = run(f"{venv}/bin/python", "-c", "import tay._native as n; print(n.IMPLEMENTATION)")
        assert implementation.strip() == "c"
        assert "serve" in run(f"{venv}/bin/python", "-m", "tay", "--help")
        assert "application" in run(f"{venv}/bin/tay-worker", "--help")
        data = scratch_dir("packaging-") / "data"
        socket_path = f"{sockets}/tay.sock"
        server = subprocess.Popen(
            [f"{venv}/bin/tay", "serve", "--data-dir", str(data), "--init-if-missing", "--durability",
             "sync", "--validated-filesystem", "--socket", socket_path],
            cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            while not os.path.exists(socket_path):
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.05)
            script = Path(sockets) / "round_trip.py"
            script.write_text(ROUND_TRIP)
            assert run(f"{venv}/bin/python", str(script), socket_path).strip() == "{'sum': 7}"
        finally:
            server.terminate()
            server.wait(timeout=20)
        assert not os.path.exists(socket_path)
