"""``tay bench PROFILE``: run a profile in per-event fsync and group-commit modes and write
a JSON result, a Markdown table and a PNG chart (see docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tay.bench.paths import bench_root
from tay.failures import ConfigurationError, StorageFailure



def register(groups: Any) -> None:
    parser = groups.add_parser("bench", help="run a benchmark profile against a real tay serve")
    add = parser.add_argument
    add("profile", metavar="PROFILE", help="a name in profiles/ (reference, quick, ...) or a path")
    add("--dir", default=None,
        help="where run directories and reports go; strict sync needs ext4/XFS/Btrfs outside "
             "/tmp (default: $TAY_BENCH_DIR, else ${XDG_DATA_HOME:-~/.local/share}/tay/bench)")
    add("--modes", default="per-event,group-commit",
        help="comma list of per-event and group-commit (default both)")
    add("--group-commit-max-events", type=int, default=64)
    add("--group-commit-interval-ms", type=int, default=0)
    add("--durability", choices=("sync", "write"), default=None,
        help="override the profile's durability (write: development runs only)")
    add("--producer-processes", type=int, default=None)
    add("--worker-processes", type=int, default=None)
    add("--jobs", type=int, default=None, help="override the profile's job count")
    add("--client", choices=("ours", "tay-client"), default="ours",
        help="the SDK of the producer and worker processes: ours, or the unmodified "
             "tay-client 1.4.0 from .venv-tay-client (make client-venv); default ours")
    add("--restarts", type=int, default=3,
        help="cold restarts measured after each run (the least is reported); default 3")
    add("--compacted-restart", choices=("on", "off"), default="on",
        help="after the cold restarts, stop once with --compact-on-stop on and measure cold "
             "restarts of the compacted store too (default on)")
    add("--syscalls", choices=("on", "by-kind", "off"), default="on",
        help="count the server's system calls over the load with perf stat: on (default) "
             "all, fdatasync, futex, write, read and epoll_wait; by-kind adds epoll_pwait, "
             "epoll_ctl, pwrite64, pread64, newfstatat, sendmsg, recvfrom and writev. Each "
             "tracepoint costs the server CPU of its own (by-kind: ~150 us per job per-event "
             "on the reference machine), so off gives the CPU figures without them")
    add("--keep-data", action="store_true", help="keep each run's store")
    add("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .harness import machine_facts, run_mode
    from .profile import load_profile
    from .report import markdown_table, write_all

    if args.dir is None:
        args.dir = str(bench_root())
    try:
        _check_flags(args)
        from .clients import interpreter

        interpreter(args.client)  # a missing tay-client venv is refused before any run
        profile = load_profile(args.profile)
        overrides = {key: value for key, value in (
            ("producer_processes", args.producer_processes),
            ("worker_processes", args.worker_processes), ("jobs", args.jobs))
            if value is not None}
        if "jobs" in overrides:
            overrides["expected_events"] = 3 * overrides["jobs"]
        profile = replace(profile, **overrides)
        modes = _modes(args, profile)
        durability = args.durability or profile.durability
        runs = [run_mode(profile, mode, args.dir, durability=durability,
                         show_progress=not args.no_progress and sys.stderr.isatty(),
                         keep_data=args.keep_data, sdk=args.client, restarts=args.restarts,
                         compacted_restart=args.compacted_restart == "on",
                         syscalls=args.syscalls)
                for mode in modes]
    except ConfigurationError as error:  # a bad flag or profile: a usage error
        print(f"tay bench: {error.message}", file=sys.stderr)
        return 2
    except StorageFailure as error:
        print(f"tay bench: {error.message}", file=sys.stderr)
        return 1
    document = {"profile": profile.name, "profile_source": profile.source,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "machine": machine_facts(args.dir), "runs": runs}
    written = write_all(document, args.dir, f"{profile.name}-{time.strftime('%Y%m%dT%H%M%S')}")
    sys.stdout.write(markdown_table(runs))
    for kind, path in written.items():
        print(f"{kind}: {path}", file=sys.stderr)
    failed = [run for run in runs if run["completed"] != profile.jobs
              or run["events"] != profile.expected_events]
    for run_ in failed:
        print(f"tay bench: {run_['mode']}: {run_['completed']} of {profile.jobs} completed, "
              f"{run_['events']} of {profile.expected_events} job events", file=sys.stderr)
    return 1 if failed else 0


# Flag bounds checked before any run starts (the serve-side ones match ``tay serve``).
_FLAG_BOUNDS = (("jobs", "--jobs", 1, 100_000_000),
                ("producer_processes", "--producer-processes", 1, 1_024),
                ("worker_processes", "--worker-processes", 1, 1_024),
                ("group_commit_max_events", "--group-commit-max-events", 1, 1_000_000),
                ("group_commit_interval_ms", "--group-commit-interval-ms", 0, 1_000),
                ("restarts", "--restarts", 1, 100))


def _check_flags(args: argparse.Namespace) -> None:
    for attribute, flag, low, high in _FLAG_BOUNDS:
        value = getattr(args, attribute)
        if value is not None and not low <= value <= high:
            raise ConfigurationError(flag, f"must be {low}..{high}, got {value}")


def _modes(args: argparse.Namespace, profile: Any) -> list[Any]:
    from .harness import CommitMode

    known = {
        "per-event": CommitMode("per-event", profile.group_commit_max_events,
                                profile.group_commit_interval_ms),
        "group-commit": CommitMode("group-commit", args.group_commit_max_events,
                                   args.group_commit_interval_ms),
    }
    chosen = [name.strip() for name in args.modes.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ConfigurationError("--modes", f"{unknown or chosen} not in {sorted(known)}")
    return [known[name] for name in chosen]
