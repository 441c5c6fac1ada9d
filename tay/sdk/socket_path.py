"""Where the SDK connects: the shared Tay 1.8 discovery order of ``tay.socket_discovery``
(explicit argument, ``TAY_SOCKET_PATH``, ``/run/tay``, ``$XDG_RUNTIME_DIR``, ``$TMPDIR``,
``/tmp/tay-<uid>``), with its errors raised as the SDK's ``ValidationError``. Nothing is
created. ``environ``, ``uid``, ``usable_directory`` and ``shared_directory`` make every
branch testable without touching the process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from tay.errors import ValidationError
from tay.socket_discovery import MAX_SOCKET_PATH_BYTES, SHARED_RUN_DIR, SocketPathError, discover_socket

__all__ = ["MAX_SOCKET_PATH_BYTES", "SHARED_DIRECTORY", "resolve_socket_path"]

SHARED_DIRECTORY = SHARED_RUN_DIR


def resolve_socket_path(
    explicit: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    uid: int | None = None,
    usable_directory: Callable[[str], bool] | None = None,
    shared_directory: Callable[[str], bool] | None = None,
) -> str:
    """The socket path to connect to, following the discovery order."""
    try:
        return discover_socket(explicit, explicit_option="socket_path", environ=environ, uid=uid,
                               usable_directory=usable_directory, shared_directory_exists=shared_directory).path
    except SocketPathError as exc:
        raise ValidationError(str(exc)) from None
