"""Where benchmarks put their stores and reports unless told otherwise.

Under the XDG data home, ``${XDG_DATA_HOME:-~/.local/share}/tay/bench`` (like ``make
run``'s data directory and the test suite's scratch stores), never under the checkout:
strict ``sync`` refuses /tmp, /var/tmp and /dev/shm, and users clone into /tmp.
``TAY_BENCH_DIR`` moves the whole tree; ``tay bench --dir`` one run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def data_home(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME``, or ``~/.local/share`` when it is unset, empty or relative (the
    XDG base directory rules ignore a relative value)."""
    value = environ.get("XDG_DATA_HOME", "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path(os.path.expanduser("~")) / ".local" / "share"


def bench_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Reports and run directories of ``tay bench`` and the peer comparison."""
    explicit = environ.get("TAY_BENCH_DIR", "")
    return Path(explicit).absolute() if explicit else data_home(environ) / "tay" / "bench"


def bench_scratch(environ: Mapping[str, str] = os.environ) -> Path:
    """Throw-away stores of the scripts in benchmarks/ (each removes its own)."""
    return bench_root(environ) / "scratch"
