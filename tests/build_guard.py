"""The suite tests the build it claims to test: the C extension (its journal writer
included), on the CPU's CRC32C path.

Without the cffi module ``tay._native`` quietly falls back to the pure-Python twin, every
C-only test would skip and the suite would still pass. So a missing C build is a usage
error for the whole session (``tests/conftest.py``) unless ``TAY_NATIVE=python`` asks for
the pure twin on purpose; and where the CPU offers a hardware CRC32C (SSE4.2, ARMv8 CRC),
the C module must be using it unless ``TAY_CRC32C_SOFTWARE=1`` forces the portable path.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

FIX = "build it with `make venv` (or `make native` after editing csrc/)"


def pure_on_purpose(environ=os.environ) -> bool:
    return environ.get("TAY_NATIVE", "").strip().lower() == "python"


def software_crc_forced(environ=os.environ) -> bool:
    return environ.get("TAY_CRC32C_SOFTWARE", "") not in ("", "0")


def hardware_crc32c(cpuinfo: str) -> str | None:
    """The hardware CRC32C path a CPU offers, from the text of /proc/cpuinfo."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    if "sse4_2" in flags:
        return "sse4.2"
    if "crc32" in flags:
        return "armv8"
    return None


def read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def build_problem(implementation: str, crc_implementation: str, cpuinfo: str,
                  environ=os.environ) -> str | None:
    """Why this session must not run, or None."""
    if pure_on_purpose(environ):
        return None
    if implementation != "c":
        return (f"tay._native runs the {implementation} twin because the C extension does not "
                f"import ({c_import_error()}); {FIX}, or set TAY_NATIVE=python on purpose")
    writer_error = import_error("tay._native.writer")
    if writer_error is not None:
        return f"the C journal writer does not import ({writer_error}); {FIX}"
    hardware = hardware_crc32c(cpuinfo)
    if hardware and not software_crc_forced(environ) and crc_implementation != hardware:
        return (f"this CPU offers the {hardware} CRC32C instructions but the C module uses "
                f"{crc_implementation}; set TAY_CRC32C_SOFTWARE=1 to test the portable path on purpose")
    return None


def import_error(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def c_import_error() -> str:
    return import_error("tay._native.c") or "it imports now"


def c_twin() -> ModuleType:
    """``tay._native.c`` for tests that compare the twins: a failure when it is not built,
    a visible skip only when the session runs the pure twin on purpose."""
    try:
        return importlib.import_module("tay._native.c")
    except ImportError as exc:
        if pure_on_purpose():
            pytest.skip(f"the C twin is not built and TAY_NATIVE=python was set on purpose ({exc})",
                        allow_module_level=True)
        pytest.fail(f"the C twin is not built ({exc}); {FIX}", pytrace=False)
