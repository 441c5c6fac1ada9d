"""Where the Unix socket lives, and claiming that path safely.

Discovery order (seeds, protocol.md "Socket discovery"): explicit path, ``TAY_SOCKET_PATH``
(``off`` disables), ``/run/tay/tay.sock`` when ``/run/tay`` exists, a usable
``$XDG_RUNTIME_DIR/tay/tay.sock``, a usable ``$TMPDIR/tay-<uid>/tay.sock``, then
``/tmp/tay-<uid>/tay.sock``. Automatic final directories other than the shared ``/run/tay``
are made private (0700). An existing socket is replaced only after a connect probe is
refused; a live socket or any other file is never touched. Every access failure names the
path and the OS error instead of falling back to another candidate.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tay.failures import ConfigurationError

MAX_SOCKET_PATH_BYTES = 100
SHARED_RUN_DIR = "/run/tay"
ALLOWED_SOCKET_MODES = (0o600, 0o660)
PROBE_TIMEOUT_S = 0.1


@dataclass(frozen=True, slots=True)
class SocketPlan:
    """A resolved path; ``private_dir`` is the automatic directory to create with 0700."""

    path: str
    private_dir: str | None = None


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
    usable = _usable_directory if usable_directory is None else usable_directory
    if explicit is not None:
        return None if explicit == "off" else SocketPlan(_validated("--socket", explicit))
    configured = env.get("TAY_SOCKET_PATH")
    if configured:
        if configured == "off":
            return None
        return SocketPlan(_validated("TAY_SOCKET_PATH", configured))
    if os.path.isdir(shared_run_dir):
        return SocketPlan(_validated("socket", os.path.join(shared_run_dir, "tay.sock")))
    user = os.getuid() if uid is None else uid
    if type(user) is not int or user < 0:
        raise ConfigurationError("socket", f"a non-negative Unix uid is required, got {user!r}")
    for variable, directory in (("XDG_RUNTIME_DIR", "tay"), ("TMPDIR", f"tay-{user}")):
        base = env.get(variable)
        if base and usable(base):
            private_dir = os.path.abspath(os.path.join(base, directory))
            candidate = os.path.join(private_dir, "tay.sock")
            if _valid(candidate):
                return SocketPlan(candidate, private_dir)
    if not usable("/tmp"):
        raise ConfigurationError("socket", "/tmp is not a usable directory for the socket")
    private_dir = f"/tmp/tay-{user}"
    return SocketPlan(_validated("socket", f"{private_dir}/tay.sock"), private_dir)


def check_outside_data_dir(path: str, data_dir: str) -> None:
    """The socket is ephemeral: it must never live inside the durable data directory."""
    data = os.path.realpath(data_dir)
    parent = os.path.realpath(os.path.dirname(path))
    if parent == data or parent.startswith(data.rstrip("/") + "/"):
        raise ConfigurationError("socket", f"{path} is inside the data directory {data_dir}")


def bind_unix_socket(plan: SocketPlan, mode: int = 0o600, backlog: int = 512) -> socket.socket:
    """Prepare directories, clear a verified stale socket, bind, chmod and listen."""
    if mode not in ALLOWED_SOCKET_MODES:
        raise ConfigurationError("socket_mode", f"must be 0600 or 0660, got {mode:#o}")
    _prepare_directory(plan)
    _clear_stale(plan.path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(plan.path)
        os.chmod(plan.path, mode)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise _access_error(plan.path, exc) from None
    sock.setblocking(False)
    return sock


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


def _validated(option: str, path: str) -> str:
    if not _valid(path):
        raise ConfigurationError(option, f"{path!r} must be an absolute UTF-8 path of at most "
                                         f"{MAX_SOCKET_PATH_BYTES} bytes without NUL")
    normalized = os.path.abspath(path)
    if not _valid(normalized):
        raise ConfigurationError(option, f"{normalized!r} exceeds {MAX_SOCKET_PATH_BYTES} bytes")
    return normalized


def _valid(path: str) -> bool:
    if type(path) is not str or not path or not os.path.isabs(path) or "\x00" in path:
        return False
    try:
        return len(path.encode("utf-8")) <= MAX_SOCKET_PATH_BYTES
    except UnicodeEncodeError:
        return False


def _usable_directory(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)
