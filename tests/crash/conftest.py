"""What the crash tests share: a scratch directory per test."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.crash.cluster import SCRATCH


@pytest.fixture
def scratch(request):
    """A fresh directory under the scratch root (strict sync accepts it wherever the checkout
    is), named after the test's module, removed after the test."""
    SCRATCH.mkdir(exist_ok=True)
    module = request.module.__name__.rsplit(".", 1)[-1]
    root = Path(tempfile.mkdtemp(prefix=f"{module}-", dir=SCRATCH))
    yield root
    shutil.rmtree(root, ignore_errors=True)
