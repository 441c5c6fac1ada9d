"""Shared helpers for storage tests: the upstream fixtures, read as literal bytes.

Fixture files are hex text (see fixtures/upstream/README.md); these helpers only strip the
whitespace and decode the hex. Nothing here builds bytes with our own encoders.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tests.scratch import scratch_root

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
RECORD_DIR = UPSTREAM / "storage" / "record" / "v1"
SEGMENT_DIR = UPSTREAM / "storage" / "segment" / "v1"
EVENT_DIR = UPSTREAM / "events" / "v1"

SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is

FIXTURE_STORE_ID = bytes.fromhex("00112233445566778899aabbccddeeff")


def read_hex(path: Path) -> bytes:
    """The literal bytes of a single-value ``.hex`` fixture file."""
    return bytes.fromhex("".join(path.read_text(encoding="ascii").split()))


def record_fixture(name: str) -> bytes:
    """``record_fixture("f01")`` -> the bytes of storage/record/v1/f01.bin."""
    return read_hex(RECORD_DIR / f"{name}.bin.hex")


def segment_fixture(name: str) -> bytes:
    """``segment_fixture("s04")`` -> s04.tay; ``"STORE"`` / ``"s14_STORE"`` -> the markers."""
    file_name = name if name.endswith("STORE") else f"{name}.tay"
    return read_hex(SEGMENT_DIR / f"{file_name}.hex")


def event_fixture(name: str) -> bytes:
    """``event_fixture("E1")`` -> the decoded bytes of events/v1/E1.hex."""
    return read_hex(EVENT_DIR / f"{name}.hex")


class Upstream:
    """What the ``upstream`` fixture hands a test: loaders for each fixture folder."""

    store_id = FIXTURE_STORE_ID
    record = staticmethod(record_fixture)
    segment = staticmethod(segment_fixture)
    event = staticmethod(event_fixture)


@pytest.fixture(scope="session")
def upstream() -> Upstream:
    """Access to the upstream byte fixtures (conftest modules are not importable by name)."""
    return Upstream()


def scratch_path(prefix: str) -> Path:
    """A fresh, not yet existing directory name under ``SCRATCH``."""
    SCRATCH.mkdir(exist_ok=True)
    return SCRATCH / f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def data_dir(request):
    """A fresh store directory (not created), removed after the test."""
    path = scratch_path(request.module.__name__.rsplit(".", 1)[-1])
    yield path
    shutil.rmtree(path, ignore_errors=True)
