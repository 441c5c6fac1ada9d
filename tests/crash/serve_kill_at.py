"""``tay serve`` that SIGKILLs itself at one step of an online compaction.

    python -m tests.crash.serve_kill_at KIND NAME ARM_FILE -- SERVE ARGUMENTS...

The online compactor's I/O seam (which the journals it opens on each new epoch share) is a
``PowerCutIO`` that counts; from the start of the first compaction that begins once
``ARM_FILE`` exists (the test creates it: the automatic trigger may compact at any time
before), the first operation of kind ``KIND`` (open_create, write, fsync, fsync_dir, mkdir,
rename, rename_replace, unlink, rmdir, ...) on a path whose name starts with ``NAME`` kills
the server before the operation, as ``kill -9`` would (``tests/crash/kill_at.py``). The load
the clients put on the server goes on meanwhile, so the kill lands at a fixed step of the
compaction and at whatever point the journal writer has reached: the timing-free
counterpart of ``test_kill9_online_compaction``'s seeded delay.
"""

from __future__ import annotations

import os
import signal
import sys

from tay.storage.fsio import RealIO
from tests.crash.powercut import PowerCutIO


class StepKillIO(PowerCutIO):
    """Most steps run in the compaction process the server forks: the kill takes the server
    (the process dies with it), then the process itself, before the step."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__()
        self.kill_kind = kind
        self.kill_name = name
        self.armed = False
        self.server_pid = os.getpid()

    def _step(self, kind: str, path: str) -> None:
        if self.armed and kind == self.kill_kind and \
                os.path.basename(path).startswith(self.kill_name):
            os.kill(self.server_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        super()._step(kind, path)

    def write_all_at(self, fd: int, data, offset: int) -> None:
        # counted, without the append-only check of the power-cut states: a kill keeps
        # every write wherever it lands, and the journals write through this seam too
        self._step("write", self._fds.get(fd, f"fd {fd}"))
        RealIO.write_all_at(self, fd, data, offset)


def install(io: StepKillIO, arm_file: str) -> None:
    """Give every ``OnlineCompactor`` ``io``, armed when a compaction starts after
    ``arm_file`` appeared."""
    from tay.server.compaction import compactor

    make, run = compactor.OnlineCompactor.__init__, compactor.OnlineCompactor._run

    def __init__(self, driver, store, config, metrics=None, **options) -> None:
        make(self, driver, store, config, metrics, **{**options, "io": io})

    async def _run(self, trigger, retention):
        io.armed = io.armed or os.path.exists(arm_file)
        return await run(self, trigger, retention)

    compactor.OnlineCompactor.__init__ = __init__
    compactor.OnlineCompactor._run = _run


def main() -> int:
    kind, name, arm_file, separator, *serve = sys.argv[1:]
    assert separator == "--", sys.argv
    install(StepKillIO(kind, name), arm_file)
    from tay.cli import main as tay_main

    return tay_main(serve)


if __name__ == "__main__":
    sys.exit(main())
