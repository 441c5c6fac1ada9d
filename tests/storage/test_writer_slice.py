"""The C writer thread asks the fair scheduler for a short slice (``WRITER_SLICE_US``), so
that it is picked soon after each fdatasync wakes it on a busy machine: without privilege,
keeping the thread's policy and nice, never in place of a real-time priority, and across
the new threads an online compaction starts."""

from __future__ import annotations

import os
import platform
import threading

import pytest

from tests.storage.test_committers import WITHOUT_C_WRITER, payload
from tests.storage.test_writer_rt_priority import NEEDS_FIFO, journal  # noqa: F401 (fixture)
from tay.storage.journal.native_commit import WRITER_SLICE_US, NativeCommitter

pytestmark = WITHOUT_C_WRITER


def kernel_has_custom_slices() -> bool:
    """EEVDF custom slices (sched_runtime of a fair task) came with Linux 6.12."""
    numbers = platform.release().split("-")[0].split(".")
    try:
        return (int(numbers[0]), int(numbers[1])) >= (6, 12)
    except (IndexError, ValueError):
        return False


NEEDS_SLICES = pytest.mark.skipif(not kernel_has_custom_slices(),
                                  reason="the kernel predates custom fair slices (6.12)")


def start_in_thread(journal, nice: int = 0, **kwargs) -> NativeCommitter:
    """A committer whose writer thread is created by a thread at ``nice`` (Linux keeps nice
    per thread, and a new thread inherits its creator's)."""
    made: list[NativeCommitter] = []

    def create() -> None:
        if nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        made.append(NativeCommitter(journal, **kwargs))

    creator = threading.Thread(target=create)
    creator.start()
    creator.join()
    return made[0]


@NEEDS_SLICES
def test_the_writer_runs_with_the_short_slice_and_its_creators_nice(journal):
    committer = start_in_thread(journal, nice=3)
    try:
        committer.submit([(1, 1, 1, payload(1, 40))]).result(timeout=10)
        assert committer.fair_slice() == (WRITER_SLICE_US * 1000, 3, 0)
        assert committer.scheduling() == (os.SCHED_OTHER, 0)
    finally:
        committer.close()


@NEEDS_SLICES
def test_the_slice_is_asked_for_again_after_an_online_compaction_switch(journal):
    committer = NativeCommitter(journal)
    try:
        committer.submit([(1, 1, 1, payload(1, 40))]).result(timeout=10)
        handed_back = committer.suspend()
        committer.resume(handed_back)
        assert committer.fair_slice()[0] == WRITER_SLICE_US * 1000
        committer.submit([(2, 1, 1, payload(2, 40))]).result(timeout=10)
    finally:
        committer.close()


@NEEDS_FIFO
def test_a_real_time_writer_is_not_put_back_on_the_fair_scheduler(journal):
    committer = NativeCommitter(journal, rt_priority=1)
    try:
        committer.submit([(1, 1, 1, payload(1, 40))]).result(timeout=10)
        assert committer.scheduling() == (os.SCHED_FIFO, 1)
        assert committer.fair_slice()[2] == 0
    finally:
        committer.close()
