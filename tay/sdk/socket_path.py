"""Where the SDK looks for the engine's Unix socket (the Tay 1.8 discovery order).

1. the explicit argument; 2. ``TAY_SOCKET_PATH``; 3. ``/run/tay/tay.sock`` when the
``/run/tay`` directory exists (a shared volume); 4. ``$XDG_RUNTIME_DIR/tay/tay.sock`` when
that directory is usable; 5. ``$TMPDIR/tay-<uid>/tay.sock`` when usable; 6.
``/tmp/tay-<uid>/tay.sock``. Nothing is created. An explicit or configured path that is
invalid is an error, never silently replaced by a later candidate; automatic candidates
that are too long are skipped. ``environ``, ``uid``, ``usable_directory`` and
``shared_directory`` make every branch testable without touching the process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from tay.errors import ValidationError

MAX_SOCKET_PATH_BYTES = 100
SHARED_DIRECTORY = "/run/tay"


def resolve_socket_path(
    explicit: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    uid: int | None = None,
    usable_directory: Callable[[str], bool] | None = None,
    shared_directory: Callable[[str], bool] | None = None,
) -> str:
    """The socket path to connect to, following the discovery order above."""
    environment = os.environ if environ is None else environ
    usable = _usable_directory if usable_directory is None else usable_directory
    shared_exists = os.path.isdir if shared_directory is None else shared_directory

    if explicit is not None:
        return _checked(os.fspath(explicit), "socket_path")
    configured = environment.get("TAY_SOCKET_PATH")
    if configured:
        return _checked(configured, "TAY_SOCKET_PATH")
    if shared_exists(SHARED_DIRECTORY):
        return os.path.join(SHARED_DIRECTORY, "tay.sock")

    user_id = os.getuid() if uid is None else uid
    if type(user_id) is not int or user_id < 0:
        raise ValidationError(f"socket discovery needs a non-negative integer UID, got {user_id!r}")
    for variable, leaf in (("XDG_RUNTIME_DIR", "tay"), ("TMPDIR", f"tay-{user_id}")):
        directory = environment.get(variable)
        if directory and usable(directory):
            candidate = os.path.abspath(os.path.join(directory, leaf, "tay.sock"))
            if _valid(candidate):
                return candidate
    return _checked(f"/tmp/tay-{user_id}/tay.sock", "socket_path")


def _checked(path: str, source: str) -> str:
    if not _valid(path) or not _valid(os.path.abspath(path)):
        raise ValidationError(
            f"{source} must be an absolute UTF-8 path of at most {MAX_SOCKET_PATH_BYTES} "
            f"bytes without NUL, got {path!r}"
        )
    return os.path.abspath(path)


def _valid(path: object) -> bool:
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
        return False
    try:
        return len(path.encode("utf-8")) <= MAX_SOCKET_PATH_BYTES
    except UnicodeEncodeError:
        return False


def _usable_directory(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)
