"""The ``tay storage`` command group: init, inspect, repair, compact, backup, restore and
verify-file (all offline).

``init`` bootstraps a new store; ``inspect`` recovers a store read-only under its lock and
summarizes it; ``repair`` removes an incomplete final record of the highest segment (and
nothing else); ``compact``, ``backup`` and ``restore`` are in ``storage_tools``;
``verify-file`` decodes one file of a given kind. Refusals exit 1 with the
refusal's class, reason and location; usage errors exit 2 naming the flag.

This module is the command line of the storage tools (the CLI layer, like ``tay serve``'s):
``inspect`` recovers through the server's ``tay.server.recovery`` and takes serve's budget
flags, so it refuses what ``serve`` refuses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tay.failures import ConfigurationError, StorageFailure

VERIFY_KINDS = ("record", "segment", "store", "value", "event", "manifest", "current",
                "store-v2", "adoption", "v2-record")


def register(groups: Any) -> None:
    """Add the ``storage`` group to the top-level sub-parsers."""
    storage = groups.add_parser("storage",
                                help="offline store tools: init, inspect, repair, compact, backup, "
                                     "restore, verify-file")
    commands = storage.add_subparsers(dest="storage_command", metavar="COMMAND")
    commands.required = True

    init = commands.add_parser("init", help="create a new, empty store")
    init.add_argument("--data-dir", required=True, help="the store directory")
    init.add_argument("--durability", choices=("sync", "write"), default="sync")
    init.add_argument(
        "--validated-filesystem",
        action="store_true",
        help="operator attestation that the filesystem honours fsync (required for sync)",
    )
    init.set_defaults(handler=run_init)

    inspect = commands.add_parser(
        "inspect", help="recover read-only exactly as tay serve does (the engine replays every "
                        "event; the same budgets) and summarize the store; exit 1 if serve "
                        "would refuse it")
    inspect.add_argument("--data-dir", required=True, help="the store directory")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    from tay.server.cli import add_budget_arguments  # serve's own flags (CLI layer)

    add_budget_arguments(inspect.add_argument)
    inspect.set_defaults(handler=run_inspect)

    repair = commands.add_parser(
        "repair", help="remove an incomplete final record of the highest segment, which was "
                       "never acknowledged (its bytes are kept in a side file); refuse anything "
                       "else unchanged. Exit 0 repaired or nothing to do, 1 refused, 2 usage")
    repair.add_argument("--data-dir", required=True, help="the store directory")
    repair.add_argument("--json", action="store_true", help="print one JSON object")
    repair.set_defaults(handler=run_repair)

    from tay.admin.storage_tools import register_tools

    register_tools(commands)

    verify = commands.add_parser("verify-file", help="decode one file of a given kind")
    verify.add_argument("--kind", required=True, choices=VERIFY_KINDS)
    verify.add_argument("--label", help="the entry of a labelled .hex file (label:hex or "
                                        "label hex per line) to check")
    verify.add_argument("file", help="raw bytes, or a .hex text file")
    verify.set_defaults(handler=run_verify_file)


def _print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, sort_keys=False) + "\n")


def run_init(args: argparse.Namespace) -> int:
    from tay.storage.journal.writer import init_store

    try:
        init_store(
            args.data_dir,
            durability=args.durability,
            validated_filesystem=args.validated_filesystem,
        )
    except StorageFailure as failure:
        sys.stderr.write(f"tay storage init: {failure.message}\n")
        return 1
    mode_note = "" if args.durability == "sync" else " (development mode: no power-loss claim)"
    sys.stdout.write(f"initialized store at {args.data_dir}{mode_note}\n")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from tay.server.cli import budget_engine_config
    from tay.server.recovery import inspect_store
    from tay.storage.recovery.inspect import format_summary

    try:
        config = budget_engine_config(args, os.environ)
    except ConfigurationError as error:
        sys.stderr.write(f"tay storage inspect: {error.message}\n")
        return 2
    try:
        summary = inspect_store(args.data_dir, config)
    except StorageFailure as failure:
        report = {"ok": False, **failure.report()}
        if args.json:
            _print_json(report)
        else:
            sys.stdout.write(f"refused: {failure.message}\n")
        return 1
    if args.json:
        _print_json({"ok": True, **summary})
    else:
        sys.stdout.write(format_summary(summary))
    return 0


def run_repair(args: argparse.Namespace) -> int:
    from tay.storage.recovery.repair import repair_store

    try:
        outcome = repair_store(args.data_dir)
    except StorageFailure as failure:
        report = {"ok": False, "repaired": False, **failure.report()}
        if args.json:
            _print_json(report)
        else:
            finding = failure.extra.get("finding") or {}
            sys.stdout.write(f"refused: {failure.reason}; nothing was changed\n")
            if finding:
                sys.stdout.write(f"store: {_describe(finding)}\n")
        return 1
    report = outcome.report()
    if args.json:
        _print_json(report)
    elif not outcome.repaired:
        sys.stdout.write(f"nothing to repair: {report['data_dir']} passes the physical "
                         f"checks (next sequence {report['next_sequence']})\n")
    else:
        sys.stdout.write(
            f"repaired: removed {outcome.removed_bytes} bytes at offset {outcome.offset} of "
            f"{outcome.segment_path} ({_describe(outcome.finding, where=False)})\n"
            f"the removed bytes are in {outcome.side_file}; they were never acknowledged\n"
            f"next sequence {outcome.next_sequence}\n")
    return 0


def _describe(finding: dict[str, Any], where: bool = True) -> str:
    """``class: reason / detail (path P, offset O)`` of a refusal report."""
    place = ", ".join(f"{key} {finding[key]}" for key in ("path", "offset")
                      if where and key in finding)
    detail = finding.get("record_reason")
    text = f"{finding.get('class')}: {finding.get('reason')}" + (f" / {detail}" if detail else "")
    return text + (f" ({place})" if place else "")


def run_verify_file(args: argparse.Namespace) -> int:
    from tay.storage.recovery.verify import read_input, verify_bytes

    try:
        data = read_input(args.file, args.label)
    except OSError as error:
        sys.stderr.write(f"tay storage verify-file: FILE {args.file}: {error.strerror}\n")
        return 2
    except ValueError as error:
        sys.stderr.write(f"tay storage verify-file: FILE {args.file}: {error}\n")
        return 2
    report = verify_bytes(args.kind, data, path=args.file)
    _print_json(report)
    return 0 if report["ok"] else 1
