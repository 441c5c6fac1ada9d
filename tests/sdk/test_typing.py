"""The SDK's types hold under ``mypy --strict``: a typed application passes unchanged, and
each misuse in misuse.py (wrong argument types, unknown keywords, a misspelled or
unsupported job option, a result used as the wrong type) is an error on its own line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scratch import scratch_dir

HERE = Path(__file__).parent / "typed"
REPO = HERE.parents[2]


@pytest.fixture(scope="module")
def mypy_output() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(scratch_dir("mypy-")), str(HERE / "typed_app.py"), str(HERE / "misuse.py")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def error_lines(output: str, name: str) -> set[int]:
    return {int(number) for number in re.findall(rf"{name}:(\d+): error", output)}


def test_a_typed_application_passes_strict_mypy(mypy_output):
    assert error_lines(mypy_output, "typed_app.py") == set(), mypy_output


def test_each_misuse_is_an_error_on_its_line(mypy_output):
    source = (HERE / "misuse.py").read_text().splitlines()
    expected = {number for number, line in enumerate(source, 1) if line.endswith("# E")}
    assert len(expected) == 6
    assert error_lines(mypy_output, "misuse.py") == expected, mypy_output
