"""What the crash tests share: a scratch directory per test."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.crash.cluster import SCRATCH


@pytest.fixture
def scratch():
    """A fresh directory under the scratch root (strict sync accepts it wherever the checkout
    is), removed after the test. Its name stays short: a server's socket inside it must fit
    in 100 bytes, and the root is under ~/.local/share when the checkout is under /tmp."""
    SCRATCH.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="crash-", dir=SCRATCH))
    yield root
    shutil.rmtree(root, ignore_errors=True)
