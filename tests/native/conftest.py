"""Fixtures shared by the native tests: every test runs against both twins."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.build_guard import c_twin

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"


def _twins() -> list:
    params = [pytest.param("pure", id="pure")]
    params.append(pytest.param("c", id="c"))
    return params


@pytest.fixture(params=_twins())
def native(request):
    """The twin under test: ``tay._native.pure`` or ``tay._native.c`` (a failure if the C
    twin is not built, unless TAY_NATIVE=python asks for the pure twin on purpose)."""
    if request.param == "c":
        return c_twin()
    return importlib.import_module("tay._native.pure")


def fixture_bytes(relative: str) -> bytes:
    """Decoded bytes of one upstream .hex fixture (whitespace carries no meaning)."""
    return bytes.fromhex("".join((FIXTURES / relative).read_text().split()))


def record_payload(frame: bytes) -> bytes:
    """The payload of one complete Record v1 frame."""
    length = int.from_bytes(frame[16:20], "big")
    return frame[24 : 24 + length]
