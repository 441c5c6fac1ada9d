"""The data directory is private to its owner: what tay creates is 0700 (directories) and
0600 (files), whatever the umask (``fsio.DIR_MODE`` / ``FILE_MODE`` are passed to
``open``/``mkdir``; a umask can only narrow them). ``loose_modes`` finds what is already looser, for the start-up warning
of ``tay serve`` and the report of ``tay storage inspect``: tay never changes the mode of a
file it did not just create.
"""

from __future__ import annotations

import os
import stat

from tay.storage.formats.segment_ledger import LEDGER_FILE_NAME
from tay.storage.formats.store_marker import STORE_FILE_NAME

PRIVATE_BITS = 0o077  # any access for the group or other users
# root entries that are tay's own (besides names that start with ".tay" or "torn-tail-");
# every entry below segments/ and epochs/ is tay's too
OWN_ROOT_NAMES = frozenset({".tay-owner.lock", STORE_FILE_NAME, LEDGER_FILE_NAME,
                            "STORE-V2", "CURRENT", "ADOPTION", "segments", "epochs"})
OWN_TREES = ("segments", "epochs")
_LIMIT = 100_000  # entries looked at (the directory-entry budget of recovery)


def _own(name: str) -> bool:
    return name in OWN_ROOT_NAMES or name.startswith((".tay", "torn-tail-"))


def loose_modes(data_dir: str) -> list[tuple[str, int]]:
    """``(path relative to data_dir, permission bits)`` of every entry of tay's in
    ``data_dir`` (the directory itself included, as ``.``) that other users may access.
    Unrelated files of the operator's are not looked at; symlinks are skipped (recovery
    refuses them anyway)."""
    root = os.path.abspath(data_dir)
    found: list[tuple[str, int]] = []
    budget = [_LIMIT]

    def look(relative: str, info: os.stat_result) -> None:
        mode = stat.S_IMODE(info.st_mode)
        if mode & PRIVATE_BITS:
            found.append((relative, mode))

    def walk(relative: str) -> None:
        path = os.path.join(root, relative)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            budget[0] -= 1
            if budget[0] < 0:
                return
            if relative == "." and not _own(name):
                continue
            child = os.path.normpath(os.path.join(relative, name))
            try:
                info = os.lstat(os.path.join(root, child))
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            look(child, info)
            if stat.S_ISDIR(info.st_mode) and (relative != "." or name in OWN_TREES):
                walk(child)

    try:
        look(".", os.lstat(root))
    except OSError:
        return found
    walk(".")
    return found


def describe_loose(data_dir: str, loose: list[tuple[str, int]], shown: int = 5) -> str:
    """One warning sentence: what is readable by others and the command that fixes it."""
    listed = ", ".join(f"{path} {mode:04o}" for path, mode in loose[:shown])
    more = f" and {len(loose) - shown} more" if len(loose) > shown else ""
    return (f"{len(loose)} entries of the data directory {data_dir} are open to other local "
            f"users ({listed}{more}); they can read job arguments and results. tay creates "
            f"0700 directories and 0600 files: `chmod -R go-rwx {data_dir}` makes the existing "
            f"ones private too")
