"""The Tay 1.8 socket discovery order, shared by the server (where to listen) and the SDK
(where to connect), so both sides always agree on the path.

Order: 1. the explicit path; 2. ``TAY_SOCKET_PATH``; 3. ``/run/tay/tay.sock`` when the
``/run/tay`` directory exists (a shared volume); 4. ``$XDG_RUNTIME_DIR/tay/tay.sock`` when
that directory is usable; 5. ``$TMPDIR/tay-<uid>/tay.sock`` when usable; 6.
``/tmp/tay-<uid>/tay.sock``. An explicit or configured path that is invalid is an error,
never silently replaced by a later candidate; automatic candidates that are too long are
skipped. Nothing is created or touched here: the server's ``off`` switch, directory
creation and stale-socket handling stay server-side, and each side turns
``SocketPathError`` into its own error type. Pure standard library, so it sits below both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from tay._frozen import Frozen, set_field

MAX_SOCKET_PATH_BYTES = 100
SHARED_RUN_DIR = "/run/tay"
SOCKET_FILE_NAME = "tay.sock"
ENVIRONMENT_VARIABLE = "TAY_SOCKET_PATH"

# Where a discovered path came from (``DiscoveredSocket.source``).
FROM_EXPLICIT = "explicit"
FROM_ENVIRONMENT = "environment"
FROM_SHARED_DIR = "shared"
FROM_USER_DIR = "user"
FROM_TMP_FALLBACK = "tmp"


class SocketPathError(ValueError):
    """A socket path (or the UID it is derived from) is unusable; ``option`` names its origin."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


class DiscoveredSocket(Frozen):
    """A resolved socket path; ``private_dir`` is the per-user directory the server makes 0700."""

    __slots__ = ("path", "source", "private_dir")
    path: str
    source: str
    private_dir: str | None

    def __init__(self, path: str, source: str, private_dir: str | None = None) -> None:
        set_field(self, "path", path)
        set_field(self, "source", source)
        set_field(self, "private_dir", private_dir)


def discover_socket(
    explicit: str | os.PathLike[str] | None = None,
    *,
    explicit_option: str = "socket_path",
    environ: Mapping[str, str] | None = None,
    uid: int | None = None,
    usable_directory: Callable[[str], bool] | None = None,
    shared_directory_exists: Callable[[str], bool] | None = None,
    shared_run_dir: str = SHARED_RUN_DIR,
) -> DiscoveredSocket:
    """Follow the discovery order above; ``explicit_option`` names the explicit argument in errors."""
    environment = os.environ if environ is None else environ
    usable = usable_directory_default if usable_directory is None else usable_directory
    shared_exists = os.path.isdir if shared_directory_exists is None else shared_directory_exists

    if explicit is not None:
        return DiscoveredSocket(checked_socket_path(explicit_option, os.fspath(explicit)), FROM_EXPLICIT)
    configured = environment.get(ENVIRONMENT_VARIABLE)
    if configured:
        return DiscoveredSocket(checked_socket_path(ENVIRONMENT_VARIABLE, configured), FROM_ENVIRONMENT)
    if shared_exists(shared_run_dir):
        shared = os.path.join(shared_run_dir, SOCKET_FILE_NAME)
        return DiscoveredSocket(checked_socket_path("socket", shared), FROM_SHARED_DIR)

    user_id = os.getuid() if uid is None else uid
    if type(user_id) is not int or user_id < 0:
        raise SocketPathError("uid", f"socket discovery needs a non-negative integer UID, got {user_id!r}")
    for variable, leaf in (("XDG_RUNTIME_DIR", "tay"), ("TMPDIR", f"tay-{user_id}")):
        base = environment.get(variable)
        if base and usable(base):
            private_dir = os.path.abspath(os.path.join(base, leaf))
            candidate = os.path.join(private_dir, SOCKET_FILE_NAME)
            if valid_socket_path(candidate):
                return DiscoveredSocket(candidate, FROM_USER_DIR, private_dir)
    private_dir = f"/tmp/tay-{user_id}"
    fallback = checked_socket_path("socket", f"{private_dir}/{SOCKET_FILE_NAME}")
    return DiscoveredSocket(fallback, FROM_TMP_FALLBACK, private_dir)


def checked_socket_path(option: str, path: str) -> str:
    """``path`` made absolute-normal, or ``SocketPathError`` naming ``option``."""
    if not valid_socket_path(path):
        raise SocketPathError(option, f"must be an absolute UTF-8 path of at most {MAX_SOCKET_PATH_BYTES} "
                                      f"bytes without NUL, got {path!r}")
    normalized = os.path.abspath(path)
    if not valid_socket_path(normalized):
        raise SocketPathError(option, f"{normalized!r} exceeds {MAX_SOCKET_PATH_BYTES} bytes")
    return normalized


def valid_socket_path(path: object) -> bool:
    """Absolute, non-empty, NUL-free UTF-8 of at most ``MAX_SOCKET_PATH_BYTES`` bytes."""
    if type(path) is not str or not path or "\x00" in path or not os.path.isabs(path):
        return False
    try:
        return len(path.encode("utf-8")) <= MAX_SOCKET_PATH_BYTES
    except UnicodeEncodeError:
        return False


def usable_directory_default(path: str) -> bool:
    """A directory this process can create entries in."""
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)
