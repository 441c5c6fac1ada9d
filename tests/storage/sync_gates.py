"""One test gate over either journal writer: hold every batch fdatasync until the test opens
it, and optionally make the held one fail. The Python writer is gated through its I/O seam
(``GatedSyncIO``), the C writer through its test seam (``tay_writer_test_gate``)."""

from __future__ import annotations

import time

from tay.storage.journal.native_commit import NativeCommitter


class SyncGate:
    """``arm`` before the batch, ``entered`` once its fdatasync is held, ``release`` it."""

    def __init__(self, committer, journal) -> None:
        from tests.storage.test_commit import GatedSyncIO

        self.committer = committer
        self.native = isinstance(committer, NativeCommitter)
        self.io = None
        if not self.native:
            self.io = GatedSyncIO()
            self.io.gate.set()
            journal.io = self.io  # every later batch fsync goes through the gate
        self.arm()

    def arm(self) -> None:
        if self.native:
            self.committer._writer.test_gate(True)
        else:
            self.io.entered.clear()
            self.io.gate.clear()

    def entered(self, timeout: float = 10.0) -> bool:
        if not self.native:
            return self.io.entered.wait(timeout)
        deadline = time.monotonic() + timeout
        while not self.committer._writer.test_gate_entered():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def fail_held_sync(self, code: int) -> None:
        if self.native:
            syncs = self.committer.io_counts()["syncs"]
            self.committer._writer.test_faults(fail_sync_at=syncs + 1, fail_errno=code)
        else:
            self.io.fail_with = code

    def release(self) -> None:
        if self.native:
            self.committer._writer.test_gate(False)
        else:
            self.io.gate.set()
