"""Run the crash matrix's compaction in this process and SIGKILL it at operation N.

    python -m tests.crash.kill_at DATA_DIR N [stop]

(``stop``: the snapshot a clean ``tay serve --compact-on-stop`` takes instead.)

A real ``kill -9``: no ``finally`` runs, the kernel closes the descriptors and drops the
owner lock, the page cache keeps what was written. ``test_compaction_crash_matrix`` checks
that a real kill leaves what its in-process "kill" mode assumes.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.crash.powercut import SharedCountIO


class KillIO(SharedCountIO):
    """Counts like PowerCutIO; at operation ``kill_at`` the process is killed for real. An
    online compaction's operations are counted in the process the server forks for it too,
    and a kill there takes the server first (the process dies with it)."""

    def __init__(self, kill_at: int) -> None:
        super().__init__()
        self.kill_at = kill_at
        self.server_pid = os.getpid()

    def _step(self, kind: str, path: str) -> None:
        if self.next_index() == self.kill_at:
            os.kill(self.server_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        super()._step(kind, path)


def main() -> None:
    root, index = Path(sys.argv[1]), int(sys.argv[2])
    if sys.argv[3:] == ["stop"]:  # the snapshot of a clean stop (--compact-on-stop)
        from tests.crash.test_kill9_stop_compaction import stop

        stop(root, KillIO(index))
    else:
        from tests.crash.test_compaction_crash_matrix import compact

        compact(root, KillIO(index))
    sys.exit(3)  # not killed: the index was past the last operation


if __name__ == "__main__":
    main()
