"""Cold backup and restore (``tay storage backup`` / ``restore``), as the compatibility
seed's upgrade procedure needs: drain and stop the engine, copy the store, check the copy.

``backup_store(data_dir, to)`` takes the store's owner lock (so it refuses while an engine
owns the store), recovers it read-only (a store that would not open is not backed up),
copies exactly the files the selected store needs (v1: STORE and ``segments/``; Store v2:
STORE, STORE-V2, CURRENT and the selected epoch's MANIFEST and segments; never candidates,
old epochs or legacy directories) into a private sibling staging directory (0700
directories, 0600 files, each fsynced), writes ``tay-backup.json`` (store id, version,
epoch, and every file's size and SHA-256), publishes the directory with a no-replace rename
and then verifies the copy: every file against the catalog, and a read-only recovery of the
copy itself (a backup is a store that opens).

``restore_store(from_dir, data_dir)`` verifies the catalog first (every file present with
its size and SHA-256, nothing else), refuses a target that exists and is not empty, copies
the same way, and proves the restored store opens. Restoring is an explicit recovery-point
decision (the seed): acknowledged work after the backup is absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from typing import Any

from tay.failures import RecoveryRefused
from tay.storage import layout
from tay.storage.fsio import DIR_MODE, FILE_MODE, RealIO
from tay.storage.recovery.recover import TableConsumer, recover

CATALOG_NAME = "tay-backup.json"
CATALOG_FORMAT = "tay-backup-1"
_CHUNK = 1 << 20


def _refuse(reason: str, path: str, **extra: Any) -> RecoveryRefused:
    return RecoveryRefused("argument", reason, path=path, stage="backup", **extra)


def _needed_files(root: str, recovered: Any) -> list[tuple[str, str]]:
    """(source path, path relative to the copy) of every file the store needs."""
    view = recovered.view
    files = [(os.path.join(root, "STORE"), "STORE")]
    if recovered.store_version == 2:
        files += [(os.path.join(root, name), name) for name in ("STORE-V2", "CURRENT")]
        epoch = os.path.relpath(view.epoch.path, root)
        files.append((os.path.join(view.epoch.path, "MANIFEST"), f"{epoch}/MANIFEST"))
        files += [(s.path, f"{epoch}/segments/{os.path.basename(s.path)}")
                  for s in view.segments]
    else:  # also an interrupted adoption read in place: its segments go back to segments/
        files += [(s.path, f"segments/{os.path.basename(s.path)}") for s in view.segments]
    return files


def _copy(io: RealIO, source: str, target: str) -> tuple[int, str]:
    """Copy one file (0600, fsynced); returns its size and SHA-256."""
    digest = hashlib.sha256()
    size = 0
    src = io.open(source, os.O_RDONLY)
    try:
        dst = io.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            while True:
                piece = io.read_at(src, _CHUNK, size)
                if not piece:
                    break
                io.write_all_at(dst, piece, size)
                digest.update(piece)
                size += len(piece)
            io.fsync(dst)
        finally:
            io.close(dst)
    finally:
        io.close(src)
    return size, digest.hexdigest()


def _make_dirs(io: RealIO, base: str, relative: str, made: set[str]) -> None:
    parts = relative.split("/")[:-1]
    path = base
    for part in parts:
        path = os.path.join(path, part)
        if path not in made:
            io.mkdir(path, DIR_MODE)
            made.add(path)


def _fsync_tree(io: RealIO, base: str) -> None:
    for directory, _, _ in sorted(os.walk(base), key=lambda item: -len(item[0])):
        io.fsync_dir(directory)


def _check_target(target: str) -> None:
    if os.path.lexists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise _refuse("target_not_empty", target)


def _copy_tree(io: RealIO, files: list[tuple[str, str]], target: str,
               catalog: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Copy ``files`` into a private staging sibling of ``target`` and publish it there."""
    parent = os.path.dirname(target)
    staging = os.path.join(parent, f".{os.path.basename(target)}.tay-copy-{os.urandom(8).hex()}.tmp")
    io.mkdir(staging, DIR_MODE)
    made = {staging}
    listed = []
    # STORE last: a partial copy never looks like a whole store
    for source, relative in sorted(files, key=lambda item: item[1] == "STORE"):
        _make_dirs(io, staging, relative, made)
        size, sha = _copy(io, source, os.path.join(staging, relative))
        listed.append({"path": relative, "bytes": size, "sha256": sha})
    io.close(io.open(os.path.join(staging, layout.LOCK_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     FILE_MODE))
    if catalog is not None:
        catalog["files"] = sorted(listed, key=lambda entry: entry["path"])
        raw = json.dumps(catalog, indent=2, sort_keys=True).encode() + b"\n"
        fd = io.open(os.path.join(staging, CATALOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     FILE_MODE)
        try:
            io.write_all_at(fd, raw, 0)
            io.fsync(fd)
        finally:
            io.close(fd)
    _fsync_tree(io, staging)
    if os.path.isdir(target):
        os.rmdir(target)  # empty (checked): the published copy takes its name
    io.move_noreplace(parent, os.path.basename(staging), parent, os.path.basename(target))
    io.fsync_dir(parent)
    return listed


def read_catalog(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, CATALOG_NAME)
    try:
        with open(path, "rb") as handle:
            catalog = json.loads(handle.read())
    except (OSError, ValueError) as error:
        raise _refuse("catalog_unreadable", path, error=str(error)) from None
    if not isinstance(catalog, dict) or catalog.get("format") != CATALOG_FORMAT or \
            not isinstance(catalog.get("files"), list):
        raise _refuse("catalog_format", path)
    return catalog


def verify_copy(directory: str, catalog: dict[str, Any]) -> None:
    """Every catalogued file is there with its size and SHA-256, and nothing else is."""
    expected = {entry["path"]: entry for entry in catalog["files"]}
    found = set()
    for base, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(base, name)
            relative = os.path.relpath(path, directory)
            if relative not in (CATALOG_NAME, layout.LOCK_NAME):
                found.add(relative)
                if not stat.S_ISREG(os.lstat(path).st_mode):  # the copy never follows links
                    raise _refuse("catalog_not_a_regular_file", path)
    if found != set(expected):
        raise _refuse("catalog_files_differ", directory, missing=sorted(set(expected) - found),
                      unexpected=sorted(found - set(expected)))
    for relative, entry in expected.items():
        digest = hashlib.sha256()
        with open(os.path.join(directory, relative), "rb") as handle:
            for piece in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(piece)
        size = os.path.getsize(os.path.join(directory, relative))
        if size != entry["bytes"] or digest.hexdigest() != entry["sha256"]:
            raise _refuse("catalog_mismatch", os.path.join(directory, relative))


def _opens(directory: str) -> dict[str, Any]:
    table = TableConsumer()
    recovered = recover(directory, consumer=table, activate=False)
    return {"store_version": recovered.store_version, "records": recovered.records_replayed,
            "jobs": len(table.table), "job_states": table.table.counts()}


def backup_store(data_dir: str, target: str, *, io: RealIO | None = None) -> dict[str, Any]:
    io = io or RealIO()
    root, target = os.path.abspath(data_dir), os.path.abspath(target)
    if os.path.commonpath([root, target]) == root:
        raise _refuse("target_inside_store", target)
    _check_target(target)
    lock = layout.acquire_lock(io, root, create=False, fsync_ancestors=False)
    try:
        table = TableConsumer()
        recovered = recover(root, consumer=table, io=io, activate=False, lock=lock)
        catalog = {"format": CATALOG_FORMAT, "store_id": recovered.view.store_id.hex(),
                   "store_version": recovered.store_version,
                   "epoch_id": (recovered.view.epoch_id.hex()
                                if recovered.store_version == 2 else None),
                   "created_at": time.time_ns() // 1_000_000, "jobs": len(table.table)}
        listed = _copy_tree(io, _needed_files(root, recovered), target, catalog)
    finally:
        lock.release()
    verify_copy(target, read_catalog(target))
    return {"data_dir": root, "to": target, "files": len(listed),
            "bytes": sum(entry["bytes"] for entry in listed), **_opens(target),
            "catalog": os.path.join(target, CATALOG_NAME)}


def restore_store(source: str, data_dir: str, *, io: RealIO | None = None) -> dict[str, Any]:
    io = io or RealIO()
    source, target = os.path.abspath(source), os.path.abspath(data_dir)
    catalog = read_catalog(source)
    verify_copy(source, catalog)
    _check_target(target)
    files = [(os.path.join(source, entry["path"]), entry["path"]) for entry in catalog["files"]]
    listed = _copy_tree(io, files, target, None)
    for entry, copied in zip(sorted(catalog["files"], key=lambda e: e["path"]),
                             sorted(listed, key=lambda e: e["path"])):
        if (entry["bytes"], entry["sha256"]) != (copied["bytes"], copied["sha256"]):
            raise _refuse("copy_mismatch", os.path.join(target, entry["path"]))
    return {"from": source, "data_dir": target, "files": len(listed), **_opens(target)}
