"""An online compaction's storage work in a process of its own (docs/compaction.md).

The server forks at the capture: the child starts as an exact copy of the engine's state
at the frozen source, so the capture crosses without being copied or encoded, and it
prepares, extends and verifies the candidate (``online.prepare``, ``copy_ahead``,
``publish_switch``, ``verify_live_jobs``) under its own interpreter lock. On a worker
thread of the serving process, that work took the lock from the event loop every few
milliseconds: the loop served about a quarter of its enqueues while it ran.

The parent talks to the child over a socket pair, one request and one answer at a time
(``CompactionProcess``; its calls block, so the server makes them on a worker thread,
except the switch's, which holds the loop anyway). A message is a 4-byte big-endian length
and a pickle; the two ends are one program, forked, so nothing foreign is ever unpickled.
Large requests go in chunks, so that no pickling holds the parent's lock for long.

The child never touches what the parent serves with (sockets, the journal, its writer
thread, which the fork does not copy): it writes only the candidate epoch directory, by
path. It dies with the parent (``PR_SET_PDEATHSIG``), ignores the signals the operator
sends the server (the server's own stop ends it), and freezes the inherited objects out of
its collector (a full collection would walk the whole copied heap). A failure in the child
travels back as ``ProcessFailure`` with the reason and text of the original; a child that
exits or is killed is a ``ProcessFailure`` with reason ``process_exited``.
"""

from __future__ import annotations

import copyreg
import gc
import os
import pickle
import signal
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from io import BytesIO
from types import MappingProxyType
from typing import Any

from tay.failures import StorageFailure
from tay.storage.compaction import online
from tay.storage.fsio import RealIO

_LENGTH = struct.Struct(">I")
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
PROCESS_NAME = b"tay-compaction"
CHUNK = 2048  # records or jobs per message


class ProcessFailure(Exception):
    """What failed in the compaction process: ``reason`` (a storage failure's reason, an
    exception's class name, or ``process_exited``), ``detail`` its text, and ``storage``
    whether it was a ``StorageFailure`` (a verification mismatch is one)."""

    def __init__(self, reason: str, detail: str, storage: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.storage = storage


class PreparedFacts:
    """The parent's view of the child's ``online.Prepared``: what the switch and the
    report read, and the catch-up's progress."""

    def __init__(self, capture: online.Capture, facts: dict[str, Any]) -> None:
        self.capture = capture
        self.epoch_id: bytes = facts["epoch_id"]
        self.expired: dict[bytes, int] = facts["expired"]
        self.retained_jobs: int = facts["retained_jobs"]
        self.base_bytes: int = facts["base_bytes"]
        self.base_next_order: int = facts["base_next_order"]
        self.timings_ms: dict[str, int] = facts["timings_ms"]
        self.candidate_path: str = facts["candidate_path"]
        self.candidate_nonce: bytes = facts["candidate_nonce"]
        self.catch_up_records = 0
        self.touched: set[bytes] = set()

    @property
    def order_shift(self) -> int:
        return self.capture.next_order - self.base_next_order


# a job state's mappings may be read-only views of a decoded event: sent as dicts
_DISPATCH = {**copyreg.dispatch_table, MappingProxyType: lambda view: (dict, (dict(view),))}


def _dumps(value: Any) -> bytes:
    buffer = BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(value)
    return buffer.getvalue()


def _send(sock: socket.socket, value: Any) -> None:
    body = _dumps(value)
    sock.sendall(_LENGTH.pack(len(body)) + body)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    parts, left = [], size
    while left:
        part = sock.recv(min(left, 1 << 20))
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _recv(sock: socket.socket) -> tuple[bool, Any]:
    """(True, the next message), or (False, None) at the end of the stream."""
    head = _recv_exactly(sock, _LENGTH.size)
    if head is None:
        return False, None
    body = _recv_exactly(sock, _LENGTH.unpack(head)[0])
    if body is None:
        return False, None
    return True, pickle.loads(body)


def _bytes_records(records: Sequence[tuple]) -> list[tuple]:
    """Records with their payloads as bytes (a journal record may hold a memoryview)."""
    return [(*head, payload if type(payload) is bytes else bytes(payload))
            for *head, payload in records]


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), CHUNK):
        yield items[start:start + CHUNK]


class CompactionProcess:
    """The parent's end: ``start`` forks, and each method is one exchange with the child,
    blocking until it answers (``ProcessFailure`` when it failed or died)."""

    def __init__(self, pid: int, sock: socket.socket, capture: online.Capture,
                 fork_ms: float) -> None:
        self.pid = pid
        self._sock = sock
        self.capture = capture
        self.fork_ms = fork_ms
        self.prepared: PreparedFacts | None = None
        self._status: int | None = None  # once reaped (None: unknown)
        self._reaped = False
        self.usage: Any = None  # once reaped: its resource usage (os.wait4)
        self.check_usage: Any = None  # the check's (CompactionProcess.check), once reaped
        self._owner = os.getpid()  # the server: only it reaps the process

    @classmethod
    def start(cls, capture: online.Capture, io: RealIO | None = None) -> "CompactionProcess":
        """Fork a child that prepares the candidate of ``capture`` at once. Call from the
        thread that owns the process's state (the event loop): the child copies it as it is
        at this instant."""
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid, fork_ms = _fork(lambda: _child(child_end, capture, io or RealIO()),
                             parent_end.close)
        child_end.close()
        return cls(pid, parent_end, capture, fork_ms)

    # ---- the exchanges ------------------------------------------------------------------
    def wait_prepared(self) -> PreparedFacts:
        """The child's ``prepare``: the candidate is written and verified."""
        self.prepared = PreparedFacts(self.capture, self._answer())
        return self.prepared

    def copy_ahead(self, chunk: Sequence[tuple]) -> None:
        """A catch-up round (``online.copy_ahead``), sent in parts."""
        assert self.prepared is not None
        for part in _chunks(chunk):
            self._ask("extend", _bytes_records(part))
        touched, appended = self._ask("copy_ahead")
        self.prepared.touched |= touched
        self.prepared.catch_up_records = appended

    def publish_switch(self, records: Sequence[tuple]) -> tuple[Any, bytes]:
        """``online.publish_switch`` with the last catch-up (``records`` as copied: the child
        re-frames them, and keeps both forms for the verification)."""
        for part in _chunks(records):
            self._ask("extend", _bytes_records(part))
        return self._ask("publish_switch")

    def check(self, snapshot: Callable[[], tuple[Iterable[list[tuple[bytes, tuple | None]]],
                                                int, Mapping[tuple, int]]]) -> "Check":
        """Step 10, from a second fork taken now: call it where the engine stands at the
        switch. That child takes the engine's side of the comparison (``snapshot()``: each
        touched job's id and durable fields, or None if not retained, in chunks; the job
        count; the entity revisions) and sends it to the compaction process, which compares
        each chunk as it arrives (``online.verify_live_jobs``, ``verify_totals``). So the
        server's loop neither builds nor sends the engine's side: it pays one fork. The
        server must not use this process until ``Check.wait`` returned."""
        read_end, write_end = os.pipe()
        pid, fork_ms = _fork(lambda: self._check_child(write_end, snapshot),
                             lambda: os.close(read_end))
        os.close(write_end)
        return Check(self, pid, read_end, fork_ms)

    def _check_child(self, out: int, snapshot: Callable[[], tuple[Any, int, Mapping]]) -> int:
        try:
            live, live_count, live_entities = snapshot()
            for part in live:
                self._ask("live", part)
            self._ask("verify", live_count, dict(live_entities))
        except BaseException as error:  # noqa: BLE001 -- the server's to report
            result: tuple = _failure(error)
        else:
            result = ("ok", None)
        with os.fdopen(out, "wb") as pipe:
            pipe.write(_dumps(result))
        return 0

    def close(self) -> None:
        """Let the child exit and reap it (after a failure, ``kill`` it instead, so that
        nothing writes the candidate the caller is about to remove)."""
        if self._reaped:
            return
        try:
            _send(self._sock, ("exit",))
        except OSError:
            pass
        self._sock.close()
        self._status, self.usage = _reap(self.pid)
        self._reaped = True

    def kill(self) -> None:
        if self._reaped:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._sock.close()
        self._status, self.usage = _reap(self.pid)
        self._reaped = True

    # ---- plumbing -----------------------------------------------------------------------
    def _ask(self, op: str, *args: Any) -> Any:
        try:
            _send(self._sock, (op, *args))
        except OSError:
            pass  # the child is gone: its status says why, below
        return self._answer()

    def _answer(self) -> Any:
        try:
            ok, message = _recv(self._sock)
        except OSError:
            ok, message = False, None
        if not ok:
            if os.getpid() == self._owner:  # the checking child leaves that to the server
                self.kill()
            raise ProcessFailure("process_exited", "the compaction process "
                                 f"{self.pid} ended without answering ({_describe(self._status)})")
        if message[0] == "ok":
            return message[1]
        raise ProcessFailure(*message[1:])


class Check:
    """A running step-10 check (``CompactionProcess.check``)."""

    def __init__(self, process: CompactionProcess, pid: int, result_fd: int,
                 fork_ms: float) -> None:
        self.process = process
        self.pid = pid
        self._result_fd = result_fd
        self.fork_ms = fork_ms

    def wait(self) -> None:
        """Block until the check ended; ``ProcessFailure`` if it failed or a process died
        (the compaction process is then killed and reaped)."""
        with os.fdopen(self._result_fd, "rb") as pipe:
            raw = pipe.read()
        status, self.process.check_usage = _reap(self.pid)
        if not raw:
            self.process.kill()
            raise ProcessFailure("process_exited", f"the checking process {self.pid} ended "
                                 f"without answering ({_describe(status)})")
        result = pickle.loads(raw)
        if result[0] == "ok":
            return
        failure = ProcessFailure(*result[1:])
        if failure.reason == "process_exited":  # the compaction process died: say how
            self.process.kill()
            failure = ProcessFailure(failure.reason, f"the compaction process "
                                     f"{self.process.pid} ended without answering "
                                     f"({_describe(self.process._status)})", failure.storage)
        raise failure


def _reap(pid: int) -> tuple[int | None, Any]:
    """Wait for the child ``pid`` to end: its exit status and resource usage (None, None
    if something else reaped it)."""
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return None, None
    return status, usage


def _describe(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


# ---- the children -------------------------------------------------------------------------

def _fork(main: Callable[[], int], drop_parent_end: Callable[[], None]) -> tuple[int, float]:
    """Fork a child of the server that drops the parent's end of their channel, detaches
    (``_detach``) and exits with what ``main`` returns (70 if it raised); returns the
    child's pid and how long the fork took (ms). Call it on the thread that owns the state
    the child needs (the loop): the child copies it as it is at this instant."""
    server = os.getpid()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 70
        try:
            drop_parent_end()
            gc.freeze()  # the copied heap: never walked, never finalized here
            _detach(server)
            status = main()
        finally:
            os._exit(status)
    return pid, (time.perf_counter() - started) * 1000


def _child(sock: socket.socket, capture: online.Capture, io: RealIO) -> int:
    """The compaction process's life: prepare, then serve the server's requests. Returns
    the exit status."""
    try:
        prepared = online.prepare(capture, io=io)
    except BaseException as error:  # noqa: BLE001 -- every failure is the parent's to report
        _send_failure(sock, error)
        return 1
    _send(sock, ("ok", {
        "epoch_id": prepared.epoch_id, "expired": prepared.expired,
        "retained_jobs": prepared.retained_jobs, "base_bytes": prepared.base_bytes,
        "base_next_order": prepared.base_next_order, "timings_ms": prepared.timings_ms,
        "candidate_path": prepared.candidate.path, "candidate_nonce": prepared.candidate.nonce,
    }))
    session = _ChildSession(prepared, io)
    while True:
        ok, message = _recv(sock)
        if not ok or message[0] == "exit":
            return 0
        try:
            answer = session.handle(message[0], message[1:])
        except BaseException as error:  # noqa: BLE001
            _send_failure(sock, error)
            return 1
        _send(sock, ("ok", answer))


class _ChildSession:
    """The child's requests after ``prepare``: the records arrive in parts (``extend``),
    then the step that uses them; the engine's jobs for step 10 arrive
    in parts (``live``) compared as they come, then the totals (``verify``)."""

    def __init__(self, prepared: online.Prepared, io: RealIO) -> None:
        self.prepared = prepared
        self.io = io
        self.records: list[tuple] = []
        self.rest: list[tuple] = []  # ``records`` re-framed, at the switch
        self.caught_up = False  # the switch's last records replayed (for step 10)

    def handle(self, op: str, args: tuple) -> Any:
        prepared = self.prepared
        if op == "extend":
            self.records.extend(args[0])
        elif op == "live":
            self.catch_up()
            online.verify_live_jobs(prepared, args[0])
        elif op == "copy_ahead":
            chunk, self.records = self.records, []
            return online.copy_ahead(prepared, chunk), prepared.catch_up_records
        elif op == "publish_switch":
            self.rest = online.reframe(self.records, prepared.order_shift)
            return online.publish_switch(prepared, self.rest, self.io)
        elif op == "verify":
            self.catch_up()
            online.verify_totals(prepared, *args)
        else:
            raise ValueError(f"unknown request {op!r}")
        return None

    def catch_up(self) -> None:
        """Replay the switch's last records onto the verified base, once."""
        if not self.caught_up:
            online.catch_up(self.prepared, self.records, self.rest)
            self.records = self.rest = []
            self.caught_up = True


def _detach(parent_pid: int) -> None:
    """Die with the parent, leave its signals to it, and name the process for ``ps``."""
    import ctypes

    signal.set_wakeup_fd(-1)  # the parent's loop listens on it: not ours to write
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                   signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(_PR_SET_NAME, ctypes.c_char_p(PROCESS_NAME), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)


def _failure(error: BaseException) -> tuple[str, str, str, bool]:
    """An error as it crosses a process boundary: ``("failed", reason, detail, storage)``,
    the arguments of the ``ProcessFailure`` the other end raises."""
    if isinstance(error, ProcessFailure):
        return "failed", error.reason, error.detail, error.storage
    storage = isinstance(error, StorageFailure)
    reason = getattr(error, "reason", None) if storage else None
    return "failed", reason or type(error).__name__, str(error) or repr(error), storage


def _send_failure(sock: socket.socket, error: BaseException) -> None:
    try:
        _send(sock, _failure(error))
    except OSError:
        pass  # the parent is gone
