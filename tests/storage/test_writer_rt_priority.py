"""``--journal-writer-rt-priority``: the C writer thread runs SCHED_FIFO when asked, keeps
it across the new threads an online compaction starts, and a process that may not use
real-time scheduling is refused with the remedy, at start-up and by the writer itself."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from tests.storage.conftest import FIXTURE_STORE_ID, scratch_path
from tests.storage.test_committers import WITHOUT_C_WRITER, payload
from tests.unprivileged import unprivileged as run_unprivileged
from tay.failures import RecoveryRefused
from tay.server.preflight import StartupRefused, check_rt_priority
from tay.storage.journal.native_commit import NativeCommitter, make_committer
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

pytestmark = WITHOUT_C_WRITER


def fifo_refusal() -> str | None:
    """Why this machine refuses SCHED_FIFO to a thread of this process (None: it allows it),
    asked the way ``tay serve`` asks at start-up."""
    try:
        check_rt_priority(1)
    except StartupRefused as refused:
        return refused.message
    return None


NEEDS_FIFO = pytest.mark.skipif(fifo_refusal() is not None,
                                reason=f"this machine refuses SCHED_FIFO: {fifo_refusal()}")


@pytest.fixture
def journal():
    root = scratch_path("rt")
    init_store(str(root), durability="sync", validated_filesystem=True,
               store_id=FIXTURE_STORE_ID)
    opened = recover(str(root), consumer=lambda *a: None, durability="sync",
                     validated_filesystem=True).journal
    yield opened
    opened.close()


def write_some(committer: NativeCommitter, first: int, count: int) -> None:
    for future in [committer.submit([(seq, 1, 1, payload(seq, 40))])
                   for seq in range(first, first + count)]:
        future.result(timeout=10)


def test_the_writer_keeps_normal_scheduling_by_default(journal):
    committer = make_committer(journal, writer="c")
    try:
        assert committer.scheduling() == (os.SCHED_OTHER, 0)
    finally:
        committer.close()


@NEEDS_FIFO
def test_a_real_time_writer_runs_sched_fifo_and_keeps_it_after_a_resume(journal):
    committer = make_committer(journal, writer="c", rt_priority=3)
    try:
        assert committer.scheduling() == (os.SCHED_FIFO, 3)
        write_some(committer, 1, 5)
        committer.resume(committer.suspend())  # what an online compaction's switch does
        assert committer.scheduling() == (os.SCHED_FIFO, 3)
        write_some(committer, 6, 5)
        assert committer.durable == 10
    finally:
        committer.close()
    # and the interpreter's own threads were never touched
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_the_python_writer_cannot_take_a_real_time_priority(journal):
    with pytest.raises(RecoveryRefused) as refused:
        make_committer(journal, writer="python", rt_priority=3)
    assert refused.value.reason == "rt_priority_needs_c_writer"


@pytest.mark.parametrize("priority", [-1, 100])
def test_a_priority_outside_1_to_99_is_refused(journal, priority):
    with pytest.raises(ValueError, match="real-time priority"):
        make_committer(journal, writer="c", rt_priority=priority)


def unprivileged(action) -> str:
    """``action()`` in a child that may not use real-time scheduling: RLIMIT_RTPRIO 0, and
    as root it drops to ``nobody`` (losing CAP_SYS_NICE)."""
    return run_unprivileged(action, before_drop=lambda: resource.setrlimit(
        resource.RLIMIT_RTPRIO, (0, 0)))


def test_an_unprivileged_process_is_refused_before_start_up_with_the_remedy():
    def check() -> str:
        check_rt_priority(7)
        return "allowed"

    outcome = unprivileged(check)
    assert outcome.startswith(f"{StartupRefused.__name__}: "), outcome
    assert "--journal-writer-rt-priority 7: this process may not run a thread SCHED_FIFO " \
           "(Operation not permitted)" in outcome
    assert "CAP_SYS_NICE" in outcome and "LimitRTPRIO=7" in outcome
    check_rt_priority(0)  # off: nothing to check


def test_the_writer_itself_refuses_when_real_time_is_not_allowed(journal):
    # the journal's descriptors are open before the child drops its privileges
    def start() -> str:
        NativeCommitter(journal, rt_priority=2)
        return "started"

    outcome = unprivileged(start)
    assert outcome.startswith("PermissionError: [Errno 1] the journal writer cannot run "
                              "SCHED_FIFO at priority 2"), outcome


# ---- tay serve ---------------------------------------------------------------------------

def config_of(*flags: str, env: dict[str, str] | None = None):
    from tests.server.test_serve_config import config_of as serve_config_of

    return serve_config_of(*flags, env=env)


def test_the_option_and_its_variable_choose_the_c_writer():
    assert config_of().journal_writer_rt_priority == 0
    config = config_of(env={"TAY_JOURNAL_WRITER_RT_PRIORITY": "5"})
    assert (config.journal_writer_rt_priority, config.journal_writer) == (5, "c")
    assert config_of("--journal-writer-rt-priority", "99").journal_writer_rt_priority == 99


@pytest.mark.parametrize("flags", [("--journal-writer-rt-priority", "100"),
                                   ("--journal-writer-rt-priority", "high"),
                                   ("--journal-writer", "python",
                                    "--journal-writer-rt-priority", "5")])
def test_bad_priorities_name_the_option(flags):
    from tay.failures import ConfigurationError

    with pytest.raises(ConfigurationError) as refused:
        config_of(*flags)
    assert refused.value.option == "--journal-writer-rt-priority"


def fifo_threads(pid: int) -> list[tuple[int, int]]:
    """(thread id, real-time priority) of each SCHED_FIFO thread of process ``pid``."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            policy = os.sched_getscheduler(int(task.name))
            if policy == os.SCHED_FIFO:
                found.append((int(task.name), os.sched_getparam(int(task.name)).sched_priority))
        except (ProcessLookupError, FileNotFoundError):
            continue  # a thread that ended meanwhile
    return found


@NEEDS_FIFO
def test_a_real_server_runs_its_writer_real_time_and_says_so():
    import asyncio

    from tay import Tay
    from tay.admin.client import SocketAdmin
    from tests.sdk.server import Server, scratch_dirs

    data, sockets = scratch_dirs()
    with data, sockets:
        server = Server(os.path.join(data.name, "data"), os.path.join(sockets.name, "t.sock"),
                        "--journal-writer-rt-priority", "4").start()
        try:
            writer = SocketAdmin(server.socket_path).call("status", {})["writer"]
            assert writer == {"running": True, "error": None, "implementation": "c",
                              "rt_priority": 4}
            assert [priority for _, priority in fifo_threads(server.process.pid)] == [4]

            async def one_job() -> object:
                tay = Tay(socket_path=server.socket_path, capacity=2)

                @tay.task(name="rt.add")
                def add(a: int, b: int) -> int:
                    return a + b

                async with tay:
                    return await (await tay.enqueue("rt.add", {"a": 2, "b": 3})).result(timeout=10)

            assert asyncio.run(one_job()) == 5
        finally:
            server.stop()
