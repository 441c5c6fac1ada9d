"""Human output of the operations commands: aligned plain-text tables and key/value blocks.

Times are shown in UTC (ISO 8601, seconds); sizes in binary units. ``--json`` bypasses all
of this and prints the engine's reply unchanged.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def size(value: int | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in cells]
    return "\n".join(lines) + "\n"


def block(pairs: Iterable[tuple[str, Any]]) -> str:
    pairs = list(pairs)
    width = max(len(key) for key, _ in pairs)
    return "".join(f"{key.ljust(width)}  {'-' if value is None else value}\n" for key, value in pairs)


def render_status(reply: dict[str, Any]) -> str:
    storage = reply["storage"]
    commit = reply["commit"]
    writer = reply["writer"]
    pairs = [
        ("tay", reply["tay_version"]),
        ("up since", f"{when(reply['started_at'])} ({reply['uptime_s']:.0f} s)"),
        ("durability", reply["durability"]),
        ("data dir", reply["data_dir"]),
        ("writer", "running" if writer["running"] else f"STOPPED: {writer['error']}"),
        ("store", f"{size(storage['store_bytes'])} in {storage['files']} files"),
        ("free disk", size(storage["free_bytes"])),
        ("commits", f"{commit['events']} events in {commit['batches']} batches, "
                    f"{commit['fsyncs']} fsyncs"),
    ]
    engine = reply.get("engine")
    if engine is not None:
        jobs = engine["jobs"]
        counts = ", ".join(f"{state} {count}" for state, count in jobs["by_state"].items() if count)
        history = engine["history"] or {}
        pairs += [
            ("jobs", f"{jobs['total']} ({counts or 'none'})"),
            ("state bytes", f"{size(engine['state_bytes']['used'])} of "
                            f"{size(engine['state_bytes']['limit'])}"),
            ("history", f"{size(history.get('bytes'))} in {history.get('segments', '-')} segment(s)"
                        + (f", limit {size(history['limit'])}" if history.get("limit") else "")),
            ("admission", f"{engine['admission']['permits_in_use']} of "
                          f"{engine['admission']['permits']} permits in use"),
            ("executors", f"{engine['executors']} connected, capacity {engine['capacity']}, "
                          f"{engine['executing']} executing"),
            ("paused queues", ", ".join(engine["paused_queues"]) or "none"),
            ("schedules", engine["schedules"]),
        ]
    for name in ("socket", "http"):
        if reply.get(name):
            listener = reply[name]
            pairs.append((name, f"{listener.get('path') or listener.get('address')} "
                                f"({listener['connections']} connections)"))
    return block(pairs)


def render_jobs(reply: dict[str, Any]) -> str:
    rows = [(job["id"], job["task"], job["queue"], job["state"],
             f"{job['attempt']}/{job['max_attempts']}", when(job["inserted_at"]),
             job["error_type"]) for job in reply["jobs"]]
    text = table(("ID", "TASK", "QUEUE", "STATE", "ATTEMPT", "INSERTED", "ERROR"), rows)
    if reply.get("next_cursor"):
        text += f"more: --cursor {reply['next_cursor']}\n"
    return text


def render_job(reply: dict[str, Any]) -> str:
    job = reply["job"]
    pairs = [
        ("id", job["id"]), ("task", job["task"]), ("queue", job["queue"]),
        ("state", job["state"]), ("attempt", f"{job['attempt']}/{job['max_attempts']}"),
        ("durability", job["durability"]), ("inserted", when(job["inserted_at"])),
        ("scheduled", when(job["scheduled_at"])), ("attempted", when(job["attempted_at"])),
        ("completed", when(job["completed_at"])), ("finished", when(job["finished_at"])),
        ("timeout", f"{job['timeout_ms']} ms"), ("schedule", job["schedule_id"]),
        ("running on", job["running_on"]), ("args", job["args"]),
    ]
    if job["result_present"]:
        pairs.append(("result", job["result"]))
    text = block(pairs)
    if job["attempts"]:
        text += "\n" + table(("ATTEMPT", "STARTED", "FINISHED", "OUTCOME"), [
            (a["attempt"], when(a["started_at"]), when(a["finished_at"]), a["outcome"])
            for a in job["attempts"]])
    failure = job["failure"]
    if failure is not None:
        text += f"\nlast failure: {failure.get('type', '?')}: {failure.get('message', '')}\n"
        if failure.get("traceback"):
            text += failure["traceback"].rstrip("\n") + "\n"
    return text


def render_queues(reply: dict[str, Any]) -> str:
    rows = [(q["name"], "paused" if q["paused"] else "running", q["credits"], q["executing"],
             q["waiting"], q["by_state"]["retryable"], q["by_state"]["completed"],
             q["by_state"]["discarded"], q["by_state"]["cancelled"]) for q in reply["queues"]]
    return table(("QUEUE", "STATUS", "CREDITS", "EXECUTING", "WAITING", "RETRYABLE",
                  "COMPLETED", "DISCARDED", "CANCELLED"), rows)
