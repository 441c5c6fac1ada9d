"""The C journal writer's thread is named, so per-thread CPU (top -H, /proc/PID/task, tay
bench's split by thread) tells it from the event loop; a new writer after a suspend (an
online compaction) is named too."""

from __future__ import annotations

import os

from tests.storage.test_committers import WITHOUT_C_WRITER, payload
from tests.storage.test_writer_rt_priority import journal  # noqa: F401 (fixture)
from tay.bench.threads import WRITER_THREAD, snapshot
from tay.storage.journal.native_commit import NativeCommitter

pytestmark = WITHOUT_C_WRITER


def writer_threads() -> list[int]:
    return [tid for tid, (comm, *_) in snapshot(os.getpid()).items() if comm == WRITER_THREAD]


def test_the_writer_thread_is_named_and_does_the_writes(journal):
    before = writer_threads()
    committer = NativeCommitter(journal)
    try:
        committer.submit([(1, 1, 1, payload(1, 40))]).result(timeout=10)
        named = [tid for tid in writer_threads() if tid not in before]
        assert len(named) == 1
        assert os.getpid() not in named  # the caller's thread keeps its name
        resumed = committer.suspend()
        committer.resume(resumed)
        committer.submit([(2, 1, 1, payload(2, 40))]).result(timeout=10)
        assert len([tid for tid in writer_threads() if tid not in before]) == 1
    finally:
        committer.close()
    assert [tid for tid in writer_threads() if tid not in before] == []
