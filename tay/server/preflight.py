"""``tay serve`` start-up: the checks that can fail, run before anything is created, and
the sentences an operator reads when one of them (or the store) refuses.

``preflight`` looks at the data directory (a file, a foreign directory, a missing store,
the durability rules, a live owner), the writer's real-time priority, the socket (inside
the data dir, a directory another user could replace it in, a live listener), the TLS files
and the HTTP port, in that order, and creates nothing: the store, the
socket file and the listening port only appear once every check passed. ``explain`` turns
a store refusal into what is wrong, where, and the flag or command that resolves it; the
internal kind and reason follow in brackets for logs and searches.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from tay.failures import ConfigurationError, StorageFailure
from tay.storage import layout
from tay.storage.fsio import RealIO
from tay.storage.journal.setup import check_durability

from .uds.socket_path import (SocketPlan, check_outside_data_dir, live_listener,
                          socket_directory_problem)

if TYPE_CHECKING:
    from .serve_config import ServeConfig

STORE_NAMES = frozenset({layout.LOCK_NAME, layout.STORE_NAME, layout.SEGMENTS_DIR, *layout.V2_MARKERS})
WRITE_HINT = "--durability write (no power-loss claim)"


class StartupRefused(ConfigurationError):
    """An operator mistake found before start-up: the message is the whole sentence."""

    def __init__(self, option: str, sentence: str) -> None:
        super().__init__(option, sentence)
        self.message = sentence


def preflight(config: "ServeConfig", http: Any = None) -> None:
    """Refuse, before creating anything, what would make start-up fail half-way."""
    check_data_dir(config)
    check_rt_priority(config.journal_writer_rt_priority)
    if config.socket is not None:
        check_outside_data_dir(config.socket.path, config.data_dir)
        problem = socket_directory_problem(config.socket)
        if problem is not None:
            raise StartupRefused("--socket", problem)
        check_socket_free(config.socket)
    if http is not None:
        if http.tls:
            from .http.config import tls_context

            tls_context(http)
        check_port_free(http.ip, http.port)


def check_rt_priority(priority: int) -> None:
    """Ask the kernel itself, on a throwaway thread, whether a thread of this process may run
    SCHED_FIFO at ``priority`` (capabilities, RLIMIT_RTPRIO and a cgroup's real-time budget
    all decide it; only trying tells)."""
    if not priority:
        return
    refused: list[OSError] = []

    def probe() -> None:
        try:  # pid 0: this thread only (Linux schedules threads one by one)
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except OSError as error:
            refused.append(error)

    thread = threading.Thread(target=probe, name="tay-rt-probe")
    thread.start()
    thread.join()
    if refused:
        raise StartupRefused("--journal-writer-rt-priority", (
            f"--journal-writer-rt-priority {priority}: this process may not run a thread "
            f"SCHED_FIFO ({refused[0].strerror}). Grant it CAP_SYS_NICE (systemd: "
            f"AmbientCapabilities=CAP_SYS_NICE) or RLIMIT_RTPRIO >= {priority} (systemd: "
            f"LimitRTPRIO={priority}), or leave the option at 0."))


def check_data_dir(config: "ServeConfig") -> None:
    path = config.data_dir
    if os.path.lexists(path) and not os.path.isdir(path):
        raise StartupRefused("--data-dir", f"--data-dir {path} is not a directory. Pass the "
                             "directory of an existing store, or a new or empty one with --init-if-missing.")
    try:
        entries = set(os.listdir(path)) if os.path.isdir(path) else set()
    except OSError as error:
        raise StartupRefused("--data-dir", f"cannot read --data-dir {path} ({error.strerror}). "
                             "Run tay serve as a user who owns it, or choose another --data-dir.") from None
    if entries and not entries & STORE_NAMES:
        shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise StartupRefused("--data-dir", f"--data-dir {path} is not empty and holds no tay store "
                             f"(it contains {shown}). Pass an existing store, or a new or empty directory "
                             "with --init-if-missing.")
    if not (entries - {layout.LOCK_NAME}) and not config.init_if_missing:
        raise StartupRefused("--data-dir", f"there is no store in {path}. Create one with "
                             "--init-if-missing (or TAY_INITIALIZE_IF_MISSING=true), or pass the "
                             "--data-dir of an existing store.")
    try:
        check_durability(RealIO(), path, config.durability, config.validated_filesystem)
    except StorageFailure as failure:
        raise StartupRefused("--durability", explain(failure, path)) from None
    holder = busy_lock(os.path.join(path, layout.LOCK_NAME))
    if holder is not False:
        raise StartupRefused("--data-dir", _busy_sentence(path, holder))


def busy_lock(lock_path: str) -> int | None | bool:
    """False if nobody holds the store's owner lock; else the holder's PID (None if unknown)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file yet: recovery or init reports anything odd about it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock_holder(fd)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock we took
    return False


def lock_holder(fd: int) -> int | None:
    """The PID holding a flock on ``fd``'s file, from /proc/locks (None when not visible)."""
    info = os.fstat(fd)
    wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF" (blocked waiters have "->")
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
                    pid = int(fields[4])
                    return pid if pid > 0 else None  # 0: held from another PID namespace
    except (OSError, ValueError):
        pass
    return None


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return ""
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text if len(text) <= 120 else text[:117] + "..."


def _busy_sentence(path: str, pid: int | None) -> str:
    owner = "another process"
    if pid is not None:
        command = _command_line(pid)
        owner = f"PID {pid}" + (f" ({command})" if command else "")
    stop = f"Stop it (kill {pid}) first" if pid is not None else "Stop that server first"
    return (f"the store in {path} is already in use by {owner}. {stop}, or give this server its "
            f"own --data-dir. [ownership_busy: store_busy (path {os.path.join(path, layout.LOCK_NAME)})]")


def check_socket_free(plan: SocketPlan) -> None:
    if not live_listener(plan.path):
        return
    if plan.automatic:
        raise StartupRefused("--socket", f"another tay server already listens on {plan.path}, the "
                             "default socket every server and SDK on this host finds by discovery. "
                             "Stop that server, or give this one its own socket with --socket PATH "
                             "(or TAY_SOCKET_PATH=PATH, also for `make run` and for the clients).")
    raise StartupRefused("--socket", f"another process already listens on {plan.path}. Stop it, "
                         "or pass another --socket PATH (TAY_SOCKET_PATH).")


def check_port_free(host: str, port: int) -> None:
    """Bind the HTTP address once and let it go: a taken port is refused by name, not later
    with a traceback after the store was opened."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener binds
        try:
            probe.bind((host, port))
        except OSError as error:
            raise StartupRefused("--http-port", port_sentence(host, port, error)) from None


def port_sentence(host: str, port: int, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return (f"{host}:{port} is already in use (another tay serve? `ss -ltnp 'sport = :{port}'` "
                "names the owner). Stop it, or choose another --http-port (TAY_HTTP_PORT).")
    if error.errno == errno.EACCES:
        return (f"binding {host}:{port} needs privileges this process lacks "
                "(ports below 1024). Choose --http-port 1024 or higher.")
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this host. Pass one of its addresses to --http-ip."
    return f"cannot listen on {host}:{port}: {error.strerror or error}. Check --http-ip and --http-port."


# What to do about a store refusal, by reason; ``{path}`` is the data dir.
_FIXES = {
    "sync_requires_validated_filesystem": (
        "strict sync durability needs you to attest that {path} is on a validated local "
        "ext4, XFS or Btrfs filesystem. Add --validated-filesystem, or use " + WRITE_HINT + "."),
    "sync_refuses_volatile_path": (
        "{path} is under {prefix}, which the operating system may empty, so strict sync refuses "
        "it. Choose a --data-dir elsewhere (for example ~/.local/share/tay/data, which "
        "`make run` uses), or use " + WRITE_HINT + "."),
    "unsupported_filesystem": (
        "{path} is on a filesystem {durability} durability does not support (magic "
        "{filesystem_magic}; supported: {allowed}). Choose a --data-dir on one of those"
        "{write_hint}."),
    "sync_requires_linux": "strict sync durability runs on Linux only. Use " + WRITE_HINT + ".",
    "filesystem_probe_failed": "cannot inspect the filesystem of {path} ({error}). Check that it exists and is readable.",
    "cannot_create_data_dir": "cannot create {path} ({error}). Create it yourself or choose another --data-dir.",
    "uninitialized": ("there is no store in {path}. Create one with --init-if-missing, or pass the "
                      "--data-dir of an existing store."),
    "missing_root": ("{path} does not exist. Create a store there with --init-if-missing, or pass "
                     "the --data-dir of an existing store."),
    "missing_lock": ("{path} is not a tay store (it has no owner lock file). Pass an existing store, "
                     "or a new or empty directory with --init-if-missing."),
    "existing_store": ("{path} already holds files (it is not empty), so no new store is created "
                       "there. Pass an empty or new directory with --init-if-missing."),
    "symlink_in_path": "{path} has a symbolic link in its path; pass the real path as --data-dir.",
    "store_busy": "",  # _busy_sentence
}


def explain(failure: StorageFailure, data_dir: str) -> str:
    """The operator's sentence for a store refusal, ending with ``[kind: reason (where)]``."""
    if failure.reason == "store_busy":
        pid = None
        try:
            fd = os.open(os.path.join(data_dir, layout.LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
        else:
            pid = lock_holder(fd)
            os.close(fd)
        return _busy_sentence(data_dir, pid)
    template = _FIXES.get(failure.reason)
    values = {"path": data_dir, **failure.extra}
    remedy = failure.extra.get("remedy")
    if template is None and remedy:  # the refusal names its own fix (e.g. tay storage repair)
        return (f"the store in {data_dir} was refused and left unchanged: {remedy}. "
                f"[{failure.message.replace('; ' + remedy, '')}]")
    if template is None:
        return (f"the store in {data_dir} was refused and left unchanged. "
                f"`tay storage inspect --data-dir {data_dir}` shows the details. [{failure.message}]")
    values.setdefault("write_hint", "" if failure.extra.get("durability") == "write" else ", or use " + WRITE_HINT)
    if isinstance(values.get("allowed"), list):
        values["allowed"] = ", ".join(values["allowed"])
    try:
        sentence = template.format_map(values)
    except (KeyError, ValueError):
        sentence = template.replace("{path}", data_dir)
    return f"{sentence} [{failure.message}]"
