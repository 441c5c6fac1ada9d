"""Run a piece of a test in a forked child without root's privileges."""

from __future__ import annotations

import os
from collections.abc import Callable

NOBODY = 65534  # the conventional unprivileged uid/gid


def unprivileged(action: Callable[[], object],
                 before_drop: Callable[[], None] | None = None) -> str:
    """Run ``action()`` in a forked child without privileges and return what it reported:
    ``"ok: <its result>"`` or ``"<ExceptionName>: <message>"``.

    Root bypasses permissions and limits (CI runs as root), so as root the child drops to
    ``nobody`` first (after ``before_drop()``, e.g. lowering a limit only root may lower);
    as anyone else it runs as that user. The child reports through a pipe and leaves with
    ``os._exit``, so nothing of pytest runs twice.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        try:
            if before_drop is not None:
                before_drop()
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            outcome = f"ok: {action()}"
        except BaseException as exc:  # noqa: BLE001 - every outcome is reported
            outcome = f"{type(exc).__name__}: {exc}"
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        outcome = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, outcome
    return outcome
