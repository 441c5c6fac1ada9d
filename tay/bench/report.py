"""Results as a JSON file, a Markdown table and (when matplotlib is installed) a PNG."""

from __future__ import annotations

import json
import os
from typing import Any

MIB = 1024 * 1024


def write_json(document: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, sort_keys=False)
        handle.write("\n")


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / MIB:.1f}"


def markdown_table(runs: list[dict[str, Any]]) -> str:
    """One column per run, one row per figure."""
    header = "| Figure | " + " | ".join(run["mode"] for run in runs) + " |"
    lines = [header, "|---|" + "---|" * len(runs)]

    def row(label: str, render: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(render(run) for run in runs) + " |")

    row("client SDK", lambda r: r.get("sdk", "ours"))
    row("group commit (max events / interval ms)",
        lambda r: f"{r['group_commit']['max_events']} / {r['group_commit']['interval_ms']}")
    row("completed jobs", lambda r: f"{r['completed']:,} / {r['jobs']:,}")
    row("completed jobs/s (first insert to last finish)", lambda r: f"{r['jobs_per_s']:,.1f}")
    row("last insert acknowledged / last finish (s after the first insert); jobs not "
        "executed then", lambda r: "-" if r.get("inserts_done_s") is None
        else f"{r['inserts_done_s']:.3f} / {r['elapsed_s']:.3f}; "
             f"{r['backlog_at_inserts_done']:,}")
    row("insert RTT p50 / p95 / p99 / p999 / max (ms)", lambda r: " / ".join(
        f"{r['insert_rtt_ms'].get(key, 0):.3f}" for key in ("p50", "p95", "p99", "p999", "max")))
    row("job events (expected)", lambda r: f"{r['events']:,} ({r['expected_events']:,})")
    row("history bytes (segments)", lambda r: f"{r['history_bytes']:,} ({r['segments']})")
    row("fsyncs (largest batch; batches that gathered)", lambda r: "-" if r["fsyncs"] is None
        else f"{r['fsyncs']:,} ({r['commit_stats']['largest_batch']}; "
             f"{r['commit_stats'].get('gathered', '-')})")
    row("engine max RSS (MiB)", lambda r: _mib(r["engine_max_rss_bytes"]))
    row("engine CPU user / system (s)",
        lambda r: f"{r['engine_cpu_user_s']:.2f} / {r['engine_cpu_system_s']:.2f}")
    row("engine CPU per job, whole life / load only (us)", lambda r: (
        f"{r.get('engine_cpu_us_per_job', 0):,.1f} / {r.get('load_cpu_us_per_job', 0):,.1f}"))
    row("SDK CPU per job over the load: worker / producer (us)", lambda r: (
        f"{r.get('worker_cpu_us_per_job') or 0:,.1f} / {r.get('producer_cpu_us_per_job') or 0:,.1f}"))
    row("fsyncs per job", lambda r: "-" if r.get("fsyncs_per_job") is None
        else f"{r['fsyncs_per_job']:.3f}")
    row("syscalls per job during load (futex, write)", _syscalls)
    row("syscalls per job by kind", lambda r: ", ".join(
        f"{name} {count:.2f}" for name, count in (r.get("syscalls_per_job") or {}).items()
        if name != "all") or "-")
    row("server threads per job over the load: loop user / sys, writer user / sys (us); "
        "context switches loop / writer (involuntary)", _threads)
    row("writer per batch: idle / write / verify / fdatasync / path checks / publish (us)",
        _phases)
    row("empty-store startup (s)", lambda r: f"{r['empty_startup_s']:.3f}")
    row("cold restart to socket ready, least of runs: wall / CPU (s)",
        lambda r: f"{r['cold_restart_s']:.3f} / {r.get('cold_restart_cpu_s', 0):.3f}")
    row("cold restart peak RSS (MiB)", lambda r: _mib(r["cold_restart_peak_rss_bytes"]))
    row("clean stop with --compact-on-stop on (s); history bytes after", lambda r: "-"
        if "compacting_stop_s" not in r
        else f"{r['compacting_stop_s']:.3f}; {r['compacted_history_bytes']:,}")
    row("cold restart of the compacted store: wall / CPU (s)", lambda r: "-"
        if "compacted_restart_s" not in r
        else f"{r['compacted_restart_s']:.3f} / {r['compacted_restart_cpu_s']:.3f}")
    return "\n".join(lines) + "\n"


def _syscalls(run: dict[str, Any]) -> str:
    per_job = run.get("syscalls_per_job")
    if not per_job:
        return "skipped: " + str(run.get("load_syscalls", {}).get("skipped", "not counted"))
    return (f"{per_job['all']:.1f} ({per_job.get('futex', 0):.1f}, "
            f"{per_job.get('write', 0):.1f})")


def _threads(run: dict[str, Any]) -> str:
    per_job = run.get("threads_per_job")
    if not per_job:
        return "-"
    loop, writer = per_job["loop"], per_job["writer"]
    return (f"{loop['user_us']:,.1f} / {loop['system_us']:,.1f}, "
            f"{writer['user_us']:,.1f} / {writer['system_us']:,.1f}; "
            f"{loop['switches']:.2f} ({loop['involuntary']:.2f}) / "
            f"{writer['switches']:.2f} ({writer['involuntary']:.2f})")


def _phases(run: dict[str, Any]) -> str:
    """The C writer thread's time per batch by step (``commit_stats["phases"]``), over the
    server's whole life."""
    phases = (run.get("commit_stats") or {}).get("phases")
    if not phases or not phases.get("batches"):
        return "-"
    batches = phases["batches"]
    return " / ".join(f"{phases[step] / batches / 1000:.1f}" for step in (
        "idle_ns", "write_ns", "verify_ns", "sync_ns", "check_ns", "publish_ns"))


def write_chart(runs: list[dict[str, Any]], path: str) -> str | None:
    """Throughput and insert p99 per run; returns a note instead when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "chart skipped: matplotlib is not installed (pip install 'tay[bench]')"
    labels = [run["mode"] for run in runs]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(labels, [run["jobs_per_s"] for run in runs], color="#3b6ea5")
    left.set_title("completed jobs/s")
    right.bar(labels, [run["insert_rtt_ms"].get("p99", 0) for run in runs], color="#c0504d")
    right.set_title("insert round trip p99 (ms)")
    figure.suptitle(f"tay bench {runs[0]['profile']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


def write_all(document: dict[str, Any], out_dir: str, stem: str) -> dict[str, str]:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png``; returns what was written."""
    os.makedirs(out_dir, exist_ok=True)
    written = {"json": os.path.join(out_dir, f"{stem}.json"),
               "markdown": os.path.join(out_dir, f"{stem}.md")}
    write_json(document, written["json"])
    machine = document["machine"]
    with open(written["markdown"], "w", encoding="utf-8") as handle:
        handle.write(f"# tay bench {document['profile']}\n\n")
        handle.write(f"Machine: {machine['nproc']} CPUs, {machine['cpu_model']}, "
                     f"{machine['filesystem']}, Linux {machine['kernel']}, "
                     f"Python {machine['python']}\n\n")
        settings = machine.get("server_environment")
        if settings:
            handle.write("Server environment: " + ", ".join(
                f"`{name}={value}`" for name, value in settings.items()) + "\n\n")
        handle.write(markdown_table(document["runs"]))
    chart = os.path.join(out_dir, f"{stem}.png")
    note = write_chart(document["runs"], chart)
    if note is None:
        written["chart"] = chart
    else:
        written["chart_note"] = note
    return written
