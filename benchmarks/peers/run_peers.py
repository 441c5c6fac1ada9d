"""tay next to beanstalkd and RQ/Redis on the reference workload shape, in one run.

    .venv/bin/python -m benchmarks.peers.run_peers [--jobs 10000] [--skip-tay]

Runs tay (per-event fsync and group commit, through ``tay.bench``, with our SDK or
``--client tay-client``), then each peer with an fsync on every write and again without
fsync, and writes ``peers-<time>.json`` and ``.md`` into tay bench's directory
(``tay.bench.paths.bench_root``). Ratios are each system's figure divided by beanstalkd
``-f 0``'s, from the same invocation.
A missing peer is reported with its install command and skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from typing import Any

from tay.bench.harness import CommitMode, machine_facts, run_mode
from tay.bench.profile import load_profile
from tay.bench.report import write_json

from . import beanstalkd_peer, rq_peer
from .common import BENCH_ROOT, MissingPeer, Workload

ROOT = BENCH_ROOT


def run_tay(jobs: int, group_max_events: int, group_interval_ms: int,
            sdk: str = "ours") -> list[dict[str, Any]]:
    profile = replace(load_profile("reference"), jobs=jobs, expected_events=3 * jobs)
    modes = [CommitMode("per-event", 1, 0),
             CommitMode("group-commit", group_max_events, group_interval_ms)]
    runs = [run_mode(profile, mode, ROOT, durability="sync", show_progress=sys.stderr.isatty(),
                     sdk=sdk)
            for mode in modes]
    return [{"peer": f"tay {run['mode']} (sync, {sdk} clients)", "fsync": True,
             "jobs": run["completed"], "jobs_per_s": run["jobs_per_s"],
             "ack_rtt_ms": run["insert_rtt_ms"], "cpu_us_per_job": run["load_cpu_us_per_job"],
             "fsyncs_per_job": run["fsyncs_per_job"], "syscalls_per_job": run["syscalls_per_job"],
             "cold_restart_s": run["cold_restart_s"], "max_rss_bytes": run["engine_max_rss_bytes"]}
            for run in runs]


def run_all_peers(workload: Workload) -> tuple[list[dict[str, Any]], list[str]]:
    results, skipped = [], []
    for module in (beanstalkd_peer, rq_peer):
        for fsync in (True, False):
            try:
                results.append(module.run(workload, fsync))
            except MissingPeer as missing:
                skipped.append(str(missing))
                print(f"skipped: {missing}", file=sys.stderr)
                break
            print(f"done: {results[-1]['peer']}: {results[-1]['jobs_per_s']} jobs/s",
                  file=sys.stderr)
    return results, skipped


def markdown(rows: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    """One row per system; ratios are against ``reference`` (beanstalkd with fsync)."""
    lines = ["| System | jobs/s | ack p50 / p99 / p999 (ms) | server CPU per job (us) | "
             "jobs/s ÷ reference | p99 ÷ reference p99 |", "|---|---|---|---|---|---|"]
    for row in rows:
        rtt = row["ack_rtt_ms"]
        speed = p99 = "-"
        if reference:
            speed = f"{row['jobs_per_s'] / reference['jobs_per_s']:.2f}"
            p99 = f"{rtt['p99'] / reference['ack_rtt_ms']['p99']:.2f}"
        cpu = row.get("cpu_us_per_job")
        lines.append(f"| {row['peer']} | {row['jobs_per_s']:,.1f} | "
                     f"{rtt['p50']:.3f} / {rtt['p99']:.3f} / {rtt.get('p999', rtt['max']):.3f} | "
                     f"{'-' if cpu is None else f'{cpu:,.0f}'} | {speed} | {p99} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--skip-tay", action="store_true")
    parser.add_argument("--group-commit-max-events", type=int, default=64)
    parser.add_argument("--group-commit-interval-ms", type=int, default=0)
    parser.add_argument("--client", choices=("ours", "tay-client"), default="ours",
                        help="the SDK of tay's producer and worker processes (default ours)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tay_rows = [] if args.skip_tay else run_tay(args.jobs, args.group_commit_max_events,
                                                args.group_commit_interval_ms, args.client)
    peer_rows, skipped = run_all_peers(Workload(jobs=args.jobs))
    rows = tay_rows + peer_rows
    reference = next((row for row in peer_rows if row["peer"].startswith("beanstalkd")
                      and row["fsync"]), None)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    document = {"machine": machine_facts(ROOT), "jobs": args.jobs, "rows": rows,
                "skipped": skipped, "ratio_reference": reference and reference["peer"]}
    os.makedirs(ROOT, exist_ok=True)
    write_json(document, os.path.join(ROOT, f"peers-{stamp}.json"))
    table = markdown(rows, reference)
    with open(os.path.join(ROOT, f"peers-{stamp}.md"), "w", encoding="utf-8") as handle:
        handle.write(table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
