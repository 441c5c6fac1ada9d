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


def _writer(writer: dict[str, Any]) -> str:
    """``running (c writer, real-time priority 10)``, or why it stopped."""
    if not writer["running"]:
        return f"STOPPED: {writer['error']}"
    how = f"{writer['implementation']} writer" if writer.get("implementation") else None
    if writer.get("rt_priority"):
        how = f"{how}, real-time priority {writer['rt_priority']}"
    return f"running ({how})" if how else "running"


def _loop(loop: dict[str, Any]) -> str:
    threshold = loop["stall_threshold_s"]
    if not threshold:
        return "stalls not watched (--loop-stall-ms 0)"
    if not loop["stalls"]:
        return f"no stall over {threshold:g} s"
    last = loop["last_stall"]
    text = (f"{loop['stalls']} stall(s) over {threshold:g} s, longest "
            f"{loop['longest_stall_s']:.3f} s; last {when(last['at'])}, {last['seconds']:.3f} s")
    return text + (f" in {last['where']}" if last["where"] else "")


def _cpu(figures: dict[str, Any]) -> str:
    return f"{figures['cpu_user_s']:.1f} s user + {figures['cpu_system_s']:.1f} s system"


def _process(process: dict[str, Any]) -> str:
    limit = process["max_fds"]
    return (f"pid {process['pid']}, {size(process['rss_bytes'])} resident (peak "
            f"{size(process['peak_rss_bytes'])}), {_cpu(process)} CPU, "
            f"{process['threads']} threads, {process['open_fds']} of "
            f"{limit if limit is not None else 'unlimited'} file descriptors")


def render_status(reply: dict[str, Any]) -> str:
    storage = reply["storage"]
    commit = reply["commit"]
    writer = reply["writer"]
    pairs = [
        ("tay", reply["tay_version"]),
        ("up since", f"{when(reply['started_at'])} ({reply['uptime_s']:.0f} s)"),
        ("durability", reply["durability"]),
        ("data dir", reply["data_dir"]),
        ("writer", _writer(writer)),
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
            ("executors", f"{engine['executors']} connected"
                          + (f" ({quiet} quiet)" if (quiet := engine.get("quiet_workers")) else "")
                          + f", capacity {engine['capacity']}, {engine['executing']} executing"),
            ("paused queues", ", ".join(engine["paused_queues"]) or "none"),
            ("scaled queues", ", ".join(f"{name} {n}" for name, n in
                                        engine.get("scaled_queues", {}).items()) or "none"),
            ("rate-limited queues", ", ".join(
                f"{name} {limit['starts']}/{period(limit['period_ms'])}"
                for name, limit in engine.get("rate_limited_queues", {}).items()) or "none"),
            ("schedules", f"{engine['schedules']}"
             + (f" ({len(paused)} paused: {', '.join(paused[:5])}"
                f"{', ...' if len(paused) > 5 else ''})"
                if (paused := engine.get("paused_schedules")) else "")),
        ]
    process = reply.get("process")
    if process is not None:
        pairs.append(("process", _process(process)))
    compaction = storage.get("compaction") or {}
    if compaction.get("process"):
        running = compaction["process"]
        pairs.append(("compacting", f"process {running['pid']}: "
                                    f"{size(running['unique_bytes'])} of its own "
                                    f"({size(running['rss_bytes'])} resident), "
                                    f"{_cpu(running)} CPU"))
    loop = reply.get("loop")
    if loop is not None:
        pairs.append(("event loop", _loop(loop)))
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
    rows = [(q["name"], "paused" if q["paused"] else "running", credits(q), rate(q),
             q["executing"], q["waiting"], latency(q), q["by_state"]["retryable"],
             q["by_state"]["completed"], q["by_state"]["discarded"], q["by_state"]["cancelled"])
            for q in reply["queues"]]
    return table(("QUEUE", "STATUS", "CREDITS", "RATE LIMIT", "EXECUTING", "WAITING", "LATENCY",
                  "RETRYABLE", "COMPLETED", "DISCARDED", "CANCELLED"), rows)


def rate(queue: dict[str, Any]) -> str:
    """A queue's rate limit ("-": none), and whether it holds the queue back now."""
    limit = queue.get("rate_limit")
    if limit is None:
        return "-"
    text = f"{limit['starts']}/{period(limit['period_ms'])}"
    return text + " (holding)" if queue.get("rate_limited_until") is not None else text


# how ``tay limit`` spells a rate limit's period, both ways: a count and a unit
PERIOD_UNITS = (("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))


def period(ms: int) -> str:
    """A rate limit's period as ``tay limit`` takes it: 500ms, 1s, 90s, 5m, 2h."""
    unit, size = next(u for u in PERIOD_UNITS if ms % u[1] == 0)
    return f"{ms // size}{unit}"


def period_ms(text: str) -> int | None:
    """``period``'s text back in ms (None: not a count and a unit)."""
    unit = next((u for u in ("ms", "s", "m", "h") if text.endswith(u)), None)  # ms before m
    count = text[:-len(unit)] if unit else ""
    return int(count) * dict(PERIOD_UNITS)[unit] if count.isdigit() else None


def credits(queue: dict[str, Any]) -> str:
    """A queue's credits, and the configured ones when ``scale`` set others."""
    if queue.get("scaled"):
        return f"{queue['credits']} (scaled; configured {queue['configured_credits']})"
    return str(queue["credits"])


def latency(queue: dict[str, Any]) -> str:
    """How long the queue's oldest ready job has waited ("-": none is ready)."""
    if queue.get("oldest_ready_at") is None:
        return "-"
    return elapsed(queue["latency_ms"])


def elapsed(ms: int) -> str:
    """A measured span, rounded: 4.2 s, 3.5 min, 2.0 h."""
    seconds = max(ms, 0) / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def render_workers(reply: dict[str, Any], now_ms: int) -> str:
    """Executors, then what each runs (its oldest executions), then unserved tasks."""
    executors = [w for w in reply["workers"] if w["mode"] != "client"]
    if not executors:
        text = "no executor is connected: jobs wait until a worker connects\n"
    else:
        text = table(("RUNTIME ID", "MODE", "TRANSPORT", "QUEUE", "IN FLIGHT", "STATE",
                      "TASKS"), [
            (w["runtime_id"], w["mode"], w["transport"], w["queue"] or "any",
             f"{w['in_flight']}/{w['capacity']}", "quiet" if w.get("quiet") else "active",
             _tasks(w["tasks"])) for w in executors])
    running = [(r, w) for w in executors for r in w.get("running", [])]
    if running:
        running.sort(key=lambda pair: pair[0]["started_at"] or 0)
        text += "\nrunning (the oldest executions of each executor):\n" + table(
            ("JOB", "TASK", "QUEUE", "WORKER", "ATTEMPT", "RUNNING FOR", "TIMES OUT IN"),
            [(r["job_id"], r["task"], r["queue"], w["runtime_id"], r["attempt"],
              elapsed(now_ms - (r["started_at"] or now_ms)), elapsed(r["timeout_at"] - now_ms))
             for r, w in running])
    clients = sum(1 for w in reply["workers"] if w["mode"] == "client")
    text += f"\n{clients} producer connection(s) on the socket (this command's own among them " \
            "when it asked over the socket)\n"
    for item in reply.get("unserved", []):
        text += (f"no executor for task {item['task']} on queue {item['queue']}: ready since "
                 f"{when(item['oldest_ready_at'])}\n")
    return text


def render_actions(reply: dict[str, Any]) -> str:
    """The operator's trail, newest first."""
    if not reply["actions"]:
        return "no operator action since the engine started\n"
    return table(("AT", "ACTION", "FROM", "OUTCOME", "REQUEST"), [
        (when(a["at"]), a["op"], a["origin"],
         a["outcome"] + (f" ({a['summary']})" if a["summary"] else ""), a["request"])
        for a in reply["actions"]])


def render_tasks(reply: dict[str, Any]) -> str:
    """Per (queue, task) since start: outcomes and run times (quantiles are bucket bounds:
    "<= 250 ms")."""
    def bound(ms: int | None, runs: int) -> str:
        if not runs:
            return "-"
        return "longer" if ms is None else f"<= {_short_ms(ms)}"

    text = table(("QUEUE", "TASK", "ENQUEUED", "COMPLETED", "FAILED", "RETRIED", "CANCELLED",
                  "MEAN RUN", "P50", "P95", "P99", "EXECUTORS"), [
        (t["queue"] or "(others)", t["task"] or "(others)", t["enqueued"], t["completed"],
         t["failed"] + t["timed_out"] + t["discarded"], t["retried"], t["cancelled"],
         "-" if t["run_ms_mean"] is None else _short_ms(t["run_ms_mean"]),
         *(bound(t[f"run_ms_p{q}"], t["runs"]) for q in (50, 95, 99)), t["executors"])
        for t in reply["tasks"]])
    if reply.get("more"):
        text += "more (queue, task) pairs: --limit up to 1000\n"
    since = "in the last hour" if reply.get("window") == "hour" else "since the engine started"
    if any(not t["queue"] for t in reply["tasks"]):
        text += (f"(others): the pairs first counted after the first "
                 f"{reply['pairs_max']:,}, together\n")
    return text + f"{since}; failed counts failures, time-outs and discards\n"


def render_history(reply: dict[str, Any]) -> str:
    """One row per UTC day, oldest first, and the totals of the days shown."""
    days = reply["days"]
    rows = [(dt.datetime.fromtimestamp(d["day"] / 1000, dt.timezone.utc).strftime("%Y-%m-%d"),
             d["enqueued"], d["completed"], d["failed"]) for d in days]
    rows.append(("total", *(sum(d[key] for d in days)
                            for key in ("enqueued", "completed", "failed"))))
    return table(("DAY (UTC)", "ENQUEUED", "COMPLETED", "FAILED"), rows) + (
        "completed and failed count executions; failed counts failures, time-outs and "
        "discards; recorded every minute and at a clean stop\n")


def _short_ms(ms: int) -> str:
    return f"{ms} ms" if ms < 1_000 else elapsed(ms)


def _tasks(tasks: list[str]) -> str:
    shown = ", ".join(tasks[:5])
    return shown + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")


def duration(ms: int) -> str:
    """An interval as the largest whole unit that divides it: 90 s, 5 min, 2 h, 1 d."""
    for unit, length in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms % length == 0:
            return f"{ms // length} {unit}"
    return f"{ms} ms"


def schedule_rule(schedule: dict[str, Any]) -> str:
    if schedule["kind"] == "cron":
        zone = schedule["timezone"]
        return schedule["cron"] + (f" ({zone})" if zone and zone != "+00" else "")
    return f"every {duration(schedule['every_ms'])}"


def _last(schedule: dict[str, Any]) -> str:
    if schedule["last_at"] is None:
        return "never"
    job = schedule.get("last_job")
    return when(schedule["last_at"]) + (f" ({job['state']})" if job else "")


def render_schedules(reply: dict[str, Any]) -> str:
    rows = [(s["id"], s["task"], schedule_rule(s), s["overlap"], _next(s), _last(s))
            for s in reply["schedules"]]
    text = table(("ID", "TASK", "RULE", "OVERLAP", "NEXT", "LAST"), rows)
    if reply.get("next_cursor"):
        text += f"more: --cursor {reply['next_cursor']}\n"
    return text


def _next(schedule: dict[str, Any]) -> str:
    if schedule["cancelled_at"]:
        return f"cancelled {when(schedule['cancelled_at'])}"
    if schedule.get("paused"):
        return "paused"
    return when(schedule["next_at"])


def render_schedule(reply: dict[str, Any]) -> str:
    schedule = reply["schedule"]
    job = schedule.get("last_job")
    pairs = [
        ("id", schedule["id"]), ("task", schedule["task"]), ("rule", schedule_rule(schedule)),
        ("overlap", schedule["overlap"]), ("catch-up", schedule["catch_up"]),
        ("revision", schedule["revision"]), ("args", schedule["args"]),
        ("options", schedule["options"]), ("next", when(schedule["next_at"])),
        ("last", _last(schedule)), ("last job", job["id"] if job else None),
        ("active job", schedule["active_job_id"]),
        ("cancelled", when(schedule["cancelled_at"]) if schedule["cancelled_at"] else None),
        ("paused", "yes: no occurrence until resumed" if schedule.get("paused") else "no"),
    ]
    text = block(pairs)
    upcoming = schedule.get("next_occurrences") or []
    if upcoming:
        text += "\nnext occurrences:\n" + "".join(f"  {when(at)}\n" for at in upcoming)
    return text
