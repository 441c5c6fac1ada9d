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
import os
import socket
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tay.failures import ConfigurationError
from tay.socket_discovery import (FROM_ENVIRONMENT, FROM_EXPLICIT, FROM_TMP_FALLBACK, SHARED_RUN_DIR, SocketPathError, discover_socket,
                                  usable_directory_default)

ALLOWED_SOCKET_MODES = (0o600, 0o660)
PROBE_TIMEOUT_S = 0.1


@dataclass(frozen=True, slots=True)
class SocketPlan:
    """A resolved path; ``private_dir`` is the automatic directory to create with 0700.
    ``automatic``: found by discovery, not given by ``--socket`` or ``TAY_SOCKET_PATH``."""

    path: str
    private_dir: str | None = None
    automatic: bool = False


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
