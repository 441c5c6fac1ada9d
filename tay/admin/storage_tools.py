"""``tay storage compact | backup | restore`` (offline; each takes the store's lock).

* ``compact --data-dir D [--terminal-retention R] [--json]``: an offline Store-v2
  compaction (the first one adopts a v1 store). ``R`` is the retention this compaction
  applies and makes durable; without it the store's durable retention (24h for a v1 store,
  as ``tay serve``). The store is replayed by the engine itself, so every kind of durable
  state (jobs, results, failures, schedules, paused and scaled queues) is carried: this
  handler is part of the command layer and imports the engine.
* ``backup --data-dir D --to DIR [--json]`` and ``restore --from DIR --data-dir NEW``:
  cold copies with a SHA-256 catalog (``tay.storage.recovery.backup``).

Exit 0 done, 1 refused (the refusal's class, reason and location), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tay.failures import StorageFailure


def register_tools(commands: Any) -> None:
    compact = commands.add_parser(
        "compact", help="compact the store offline (Store v2; a v1 store is adopted): expired "
                        "terminal jobs are dropped and the history is rewritten as a snapshot")
    compact.add_argument("--data-dir", required=True, help="the store directory")
    compact.add_argument("--terminal-retention", metavar="infinity|<N>m|<N>h|<N>d",
                         help="the retention to apply and store (default: the store's own; "
                              "24h for a v1 store); 0h drops every terminal job once")
    compact.add_argument("--durability", choices=("sync", "write"), default="sync")
    compact.add_argument("--validated-filesystem", action="store_true",
                         help="operator attestation that the filesystem honours fsync "
                              "(required for sync)")
    compact.add_argument("--json", action="store_true", help="print one JSON object")
    compact.set_defaults(handler=run_compact)

    backup = commands.add_parser(
        "backup", help="cold backup of a stopped store: copies the files it needs plus a "
                       "SHA-256 catalog, then checks the copy opens")
    backup.add_argument("--data-dir", required=True, help="the store directory")
    backup.add_argument("--to", required=True, help="a new or empty directory")
    backup.add_argument("--json", action="store_true", help="print one JSON object")
    backup.set_defaults(handler=run_backup)

    restore = commands.add_parser(
        "restore", help="restore a backup into a new store directory (the catalog is "
                        "verified first; the target must be new or empty)")
    restore.add_argument("--from", dest="source", required=True, help="the backup directory")
    restore.add_argument("--data-dir", required=True, help="a new or empty directory")
    restore.add_argument("--json", action="store_true", help="print one JSON object")
    restore.set_defaults(handler=run_restore)


def _finish(args: argparse.Namespace, command: str, call: Any, describe: Any) -> int:
    try:
        report = call()
    except StorageFailure as failure:
        if args.json:
            sys.stdout.write(json.dumps({"ok": False, **failure.report()}) + "\n")
        else:
            sys.stderr.write(f"tay storage {command}: refused, nothing changed: "
                             f"{failure.message}\n")
        return 1
    if args.json:
        sys.stdout.write(json.dumps({"ok": True, **report}) + "\n")
    else:
        sys.stdout.write(describe(report))
    return 0


def run_compact(args: argparse.Namespace) -> int:
    from tay.engine import Engine, EngineConfig
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.v2.manifest import parse_retention

    retention = None
    if args.terminal_retention is not None:
        try:
            retention = parse_retention(args.terminal_retention)
        except ValueError as error:
            sys.stderr.write(f"tay storage compact: --terminal-retention: {error}\n")
            return 2
    # the budget is not checked offline: compaction only rewrites what the store holds
    engine = Engine(EngineConfig(max_state_bytes=2**62))

    def call() -> dict[str, Any]:
        return compact_offline(args.data_dir, consumer=engine, retention=retention,
                               durability=args.durability,
                               validated_filesystem=args.validated_filesystem).report()

    def describe(report: dict[str, Any]) -> str:
        adopted = " (adopted from v1)" if report["adopted"] else ""
        return (f"compacted {args.data_dir}{adopted}: epoch {report['epoch_id']}, "
                f"{report['retained_jobs']} jobs kept, {report['expired_jobs']} expired, "
                f"base {report['base_bytes']} bytes (history was {report['source_bytes']}), "
                f"retention {report['terminal_retention']}"
                + ("" if report["reclaimed"] else
                   f"; the old history is left for later: {report['reclaim_error']}") + "\n")

    return _finish(args, "compact", call, describe)


def run_backup(args: argparse.Namespace) -> int:
    from tay.storage.recovery.backup import backup_store

    return _finish(args, "backup", lambda: backup_store(args.data_dir, args.to),
                   lambda r: f"backed up {r['data_dir']} to {r['to']}: {r['files']} files, "
                             f"{r['bytes']} bytes, {r['jobs']} jobs; catalog {r['catalog']} "
                             "(the copy was verified and opens)\n")


def run_restore(args: argparse.Namespace) -> int:
    from tay.storage.recovery.backup import restore_store

    return _finish(args, "restore", lambda: restore_store(args.source, args.data_dir),
                   lambda r: f"restored {r['from']} into {r['data_dir']}: {r['files']} files, "
                             f"{r['jobs']} jobs (the store opens)\n")
