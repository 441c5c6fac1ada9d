"""The suite refuses to run without the C extension (unless the pure twin is asked for on
purpose) and without the CPU's hardware CRC32C path (tests/build_guard.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build_guard import build_problem, hardware_crc32c

REPO = Path(__file__).resolve().parents[2]
X86 = "processor\t: 0\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 popcnt avx\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
OLD = "processor\t: 0\nflags\t\t: fpu vme sse sse2\n"

# Runs pytest as the suite would, but with the cffi module made unimportable first.
WITHOUT_C = """
import sys, importlib.abc
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tay._native._tay_native":
            raise ImportError("hidden by test_build_guard")
sys.meta_path.insert(0, Hide())
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/native/test_crc32c.py", "-k", "vectors"]))
"""


@pytest.mark.parametrize("cpuinfo, expected", [(X86, "sse4.2"), (ARM, "armv8"), (OLD, None), ("", None)])
def test_the_hardware_crc_path_is_read_from_cpuinfo(cpuinfo, expected):
    assert hardware_crc32c(cpuinfo) == expected


def test_a_pure_session_is_refused_unless_asked_for():
    problem = build_problem("python", "software", X86, environ={})
    assert problem is not None and "C extension does not import" in problem
    assert build_problem("python", "software", X86, environ={"TAY_NATIVE": "python"}) is None


def test_a_software_crc_on_a_crc_capable_cpu_is_refused_unless_forced():
    problem = build_problem("c", "software", X86, environ={})
    assert problem is not None and "sse4.2" in problem
    assert build_problem("c", "software", ARM, environ={"TAY_CRC32C_SOFTWARE": "1"}) is None
    assert build_problem("c", "software", OLD, environ={}) is None
    assert build_problem("c", "armv8", ARM, environ={}) is None


def run_without_c(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("TAY_NATIVE", "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-c", WITHOUT_C], cwd=REPO, env={**environ, **env},
                          capture_output=True, text=True, timeout=120)


def test_the_suite_fails_loudly_without_the_c_extension():
    done = run_without_c()
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "C extension does not import" in done.stderr and "hidden by test_build_guard" in done.stderr


def test_the_pure_twin_on_purpose_runs_and_says_what_it_skips():
    done = run_without_c(TAY_NATIVE="python")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" in done.stdout and "skipped" in done.stdout
    assert "TAY_NATIVE=python was set on purpose" in done.stdout  # -ra names the reason
