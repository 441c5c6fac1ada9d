"""Suite-wide: refuse to run against a build other than the one the suite claims to test
(see ``tests/build_guard.py``)."""

from __future__ import annotations

import pytest

from tests.build_guard import build_problem, read_cpuinfo


def pytest_configure(config: pytest.Config) -> None:
    import tay._native as native

    problem = build_problem(native.IMPLEMENTATION, native.CRC32C_IMPLEMENTATION, read_cpuinfo())
    if problem is not None:
        raise pytest.UsageError(f"tay test suite: {problem}")


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.wall_clock import not_run

    if not_run:
        terminalreporter.section("WALL-CLOCK TESTS NOT RUN", sep="!", red=True, bold=True)
        terminalreporter.write_line(f"The tests that move a real server's clock were skipped: "
                                    f"{not_run[0]}", red=True, bold=True)
