"""Where the Unix socket lives, and claiming that path safely.

The discovery order (seeds, protocol.md "Socket discovery") is ``tay.socket_discovery``,
shared with the SDK; here ``off`` (flag or ``TAY_SOCKET_PATH``) disables the socket.
Automatic final directories other than the shared ``/run/tay`` are made private (0700).
An existing socket is replaced only after a connect probe is refused; a live socket or any
other file is never touched. Every access failure names the path and the OS error instead
of falling back to another candidate.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket
import stat
from collections.abc import Callable, Mapping

from tay import _native
from tay._frozen import Frozen, set_field
from tay.failures import ConfigurationError
from tay.socket_discovery import (FROM_ENVIRONMENT, FROM_EXPLICIT, FROM_TMP_FALLBACK, SHARED_RUN_DIR, SocketPathError, discover_socket,
                                  usable_directory_default)

ALLOWED_SOCKET_MODES = (0o600, 0o660)
PROBE_TIMEOUT_S = 0.1


class SocketPlan(Frozen):
    """A resolved path; ``private_dir`` is the automatic directory to create with 0700.
    ``automatic``: found by discovery, not given by ``--socket`` or ``TAY_SOCKET_PATH``."""

    __slots__ = ("path", "private_dir", "automatic")
    path: str
    private_dir: str | None
    automatic: bool

    def __init__(self, path: str, private_dir: str | None = None, automatic: bool = False) -> None:
        set_field(self, "path", path)
        set_field(self, "private_dir", private_dir)
        set_field(self, "automatic", automatic)


def resolve_socket_path(
    explicit: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    uid: int | None = None,
    usable_directory: Callable[[str], bool] | None = None,
    shared_run_dir: str = SHARED_RUN_DIR,
) -> SocketPlan | None:
    """Resolve the listening path; ``None`` means the socket is disabled (``off``)."""
    env = os.environ if environ is None else environ
    usable = usable_directory_default if usable_directory is None else usable_directory
    if explicit == "off" or (explicit is None and env.get("TAY_SOCKET_PATH") == "off"):
        return None
    try:
        found = discover_socket(explicit, explicit_option="--socket", environ=env, uid=uid,
                                usable_directory=usable, shared_run_dir=shared_run_dir)
    except SocketPathError as exc:
        raise ConfigurationError(exc.option, exc.problem) from None
    if found.source == FROM_TMP_FALLBACK and not usable("/tmp"):
        raise ConfigurationError("socket", "/tmp is not a usable directory for the socket")
    return SocketPlan(found.path, found.private_dir,
                      automatic=found.source not in (FROM_EXPLICIT, FROM_ENVIRONMENT))


def check_outside_data_dir(path: str, data_dir: str) -> None:
    """The socket is ephemeral: it must never live inside the durable data directory."""
    data = os.path.realpath(data_dir)
    parent = os.path.realpath(os.path.dirname(path))
    if parent == data or parent.startswith(data.rstrip("/") + "/"):
        raise ConfigurationError("socket", f"{path} is inside the data directory {data_dir}; the "
                                           "socket is ephemeral: pass a --socket PATH outside it")


def live_listener(path: str) -> bool:
    """Whether something accepts connections on ``path`` right now (a read-only probe)."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_unix_socket(plan: SocketPlan, mode: int = 0o600, backlog: int = 512) -> socket.socket:
    """Check and prepare directories, clear a verified stale socket, then bind, chmod and
    listen under a temporary name and move it to the path without replacing anything: the
    path appears only once it accepts connections (a client never meets a bound socket that
    refuses), with its final mode."""
    if mode not in ALLOWED_SOCKET_MODES:
        raise ConfigurationError("socket_mode", f"must be 0600 or 0660, got {mode:#o}")
    problem = socket_directory_problem(plan)
    if problem is not None:
        raise ConfigurationError("--socket", problem)
    _prepare_directory(plan)
    _clear_stale(plan.path)
    directory, name = os.path.split(plan.path)
    staging = f".tay-{os.getpid()}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = -1
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        remove_socket(os.path.join(directory, staging))  # left by a killed server of this PID
        sock.bind(os.path.join(directory, staging))
        os.chmod(staging, mode, dir_fd=dir_fd)
        sock.listen(backlog)
        _native.rename_noreplace(dir_fd, staging, dir_fd, name)
    except OSError as exc:
        sock.close()
        remove_socket(os.path.join(directory, staging))
        if exc.errno == errno.EEXIST:
            raise ConfigurationError("socket", f"{plan.path} appeared while this server started "
                                     "(another server?); refusing to replace it") from None
        raise _access_error(plan.path, exc) from None
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
    sock.setblocking(False)
    return sock


def socket_directory_problem(plan: SocketPlan) -> str | None:
    """Why another local user could replace the socket (and so read every producer's frames),
    as a sentence with the fix; None when its directories are safe.

    Every existing directory from the socket's parent up to ``/`` (along the path as given
    and along its resolved form) must belong to this user or root, and must not be writable
    by group or others unless it has the sticky bit (as ``/tmp``). A missing parent is
    created 0700 later. An automatic private directory is checked by ``_prepare_directory``.
    """
    start = os.path.dirname(plan.private_dir or plan.path)
    me = os.geteuid()
    for directory in _ancestors(start):
        try:
            info = os.lstat(directory)
        except OSError:
            continue  # missing: created later (0700); unreadable: the bind names the error
        if stat.S_ISLNK(info.st_mode):
            continue  # the link's own directory is checked; its target via the resolved path
        if info.st_uid not in (me, 0):
            return (f"the socket directory {directory} belongs to {_user(info.st_uid)}, not to "
                    f"this server's user ({_user(me)}) or root, so that user could replace the "
                    f"socket and read every producer's frames. Use a --socket PATH in a "
                    f"directory owned by {_user(me)} or root (TAY_SOCKET_PATH).")
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not info.st_mode & stat.S_ISVTX:
            who = "every local user" if info.st_mode & stat.S_IWOTH else \
                f"group {_group(info.st_gid)}"
            return (f"the socket directory {directory} is writable by {who} without the "
                    f"sticky bit, so they could replace the socket and read every producer's "
                    f"frames. Run `chmod go-w {directory}` (or `chmod +t {directory}`), or use a "
                    f"--socket PATH in a private directory (TAY_SOCKET_PATH).")
    return None


def _ancestors(directory: str) -> list[str]:
    """``directory`` and its parents up to ``/``, as written and as resolved (no repeats)."""
    seen: list[str] = []
    for start in (os.path.abspath(directory), os.path.realpath(directory)):
        current = start
        while True:
            if current not in seen:
                seen.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return seen


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def remove_socket(path: str) -> None:
    """Orderly shutdown: unlink the path only if it is still a socket."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def _prepare_directory(plan: SocketPlan) -> None:
    parent = os.path.dirname(plan.path)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        if plan.private_dir is not None:
            info = os.lstat(plan.private_dir)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                raise ConfigurationError(
                    "socket", f"{plan.private_dir} is not a directory owned by this user")
            os.chmod(plan.private_dir, 0o700)
    except OSError as exc:
        raise _access_error(parent, exc) from None


def _clear_stale(path: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _access_error(path, exc) from None
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigurationError("socket", f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # nobody listens: a verified stale socket
        return
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _access_error(path, exc) from None
    finally:
        probe.close()
    raise ConfigurationError("socket", f"{path} is in use by a live listener")


def _access_error(path: str, exc: OSError) -> ConfigurationError:
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return ConfigurationError("socket", f"{path}: {name}: {exc.strerror or exc}")
