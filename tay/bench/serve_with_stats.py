"""Run the real ``tay serve`` and, at shutdown, write the journal committer's counters.

The server does not yet expose ``GroupCommitter.stats()`` (no status RPC, no shutdown log
line), so this entry point wraps ``GroupCommitter.close`` to dump the counters as JSON to
``$TAY_BENCH_COMMIT_STATS`` just before the committer stops. Everything else is the
unmodified ``tay serve`` command. Remove this once the server logs the stats itself.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

from tay.storage.commit import GroupCommitter

STATS_ENV = "TAY_BENCH_COMMIT_STATS"


def _install_stats_dump(path: str) -> None:
    original_close = GroupCommitter.close

    def close_and_dump(self: GroupCommitter) -> None:
        original_close(self)  # drains the queue first, so the counters are final
        stats = asdict(self.stats())
        stats["max_events"] = self.max_events
        stats["interval_ms"] = round(self.interval_s * 1000)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(stats) + "\n")

    GroupCommitter.close = close_and_dump  # type: ignore[method-assign]


def main() -> int:
    path = os.environ.get(STATS_ENV)
    if path:
        _install_stats_dump(path)
    from tay.cli import main as tay_main

    return tay_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
