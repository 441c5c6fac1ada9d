"""The dashboard's pages (GET): each gathers what it shows from the operations API, then
names a template. Ops of one page run concurrently; none scans all jobs (docs/admin.md)."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from tay.engine.bulk_states import CANCELLABLE, DELETABLE, RETRIABLE
from tay.failures import RequestRefused
from tay.storage.events.operations import (  # what scale_queue and limit_queue take
    QUEUE_CREDITS_MAX, RATE_STARTS_MAX,
)

from .charts import history as history_chart, latency, queue_throughput, throughput
from .view import AdminFailed, redirect

if TYPE_CHECKING:
    from .view import Page, View

STATES = ("scheduled", "available", "executing", "retryable", "completed", "cancelled",
          "discarded")
TERMINAL = frozenset({"completed", "cancelled", "discarded"})
CAN_RETRY = frozenset(RETRIABLE)  # scheduled: run now
CAN_CANCEL = frozenset(CANCELLABLE)
PAGE_SIZE = 50
JOB_FILTERS = ("state", "queue", "task", "args", "error")  # the jobs page's, as URL parameters
RUNNING_MAX = 50  # executions the workers page lists
TASKS_SHOWN = 200  # (queue, task) rows the tasks page lists, the busiest first
TRAIL_MAX = 30  # "newer" links remembered while paging (older ones fall back to the first page)
_CURSOR = re.compile(r"^[0-9]{1,20}$")
_JOB_ID = re.compile(r"^[0-9a-fA-F]{1,128}$")

# job diagnostics (docs/storage-events.md, the outcome table)
DIAGNOSTICS = {1: "the task reported an error", 2: "the task raised an exception",
               3: "the task threw", 4: "the worker process exited", 5: "the attempt timed out",
               6: "the task returned a value that cannot be stored",
               7: "the run was interrupted (worker disconnected or engine restarted)"}

# the notice of a bulk action: what it did (verb) and what to do again for more (kind)
BULK_DONE = {"retried_all": ("Retried", "retry"), "cancelled_all": ("Cancelled", "cancel"),
             "deleted_all": ("Deleted", "delete")}
NOTICES = {
    "retried": "Retry requested: the job waits to run again.",
    "cancelled": "The job is cancelled.",
    "quiet": "Worker quiet: it is offered no new job; what it runs finishes.",
    "unquiet": "Worker offered jobs again.",
    "paused": "Queue paused: nothing new is dispatched from it; running jobs finish.",
    "resumed": "Queue resumed: dispatch continues.",
    "schedule_cancelled": "Schedule cancelled: no further occurrences are admitted.",
    "schedule_run": "Enqueued now from its schedule, outside the schedule's cadence.",
    "schedule_paused": "Schedule paused: no occurrence is admitted until it is resumed.",
    "schedule_resumed": "Schedule resumed: occurrences are admitted again from its next due "
                        "time; the ones missed while paused were skipped.",
    "compacted": "Compaction finished.",
}


def notice(view: View) -> str | None:
    done = view.query.get("done")
    if done == "purged":
        purged, left = view.query.get("n", "?"), view.query.get("left", "?")
        return f"Purged {purged} waiting job(s); {left} still waiting."
    if done == "limited":
        return f"Queue rate-limited: at most {view.query.get('n', '?')} job start(s) in any " \
               f"{view.query.get('period', '?')}."
    if done == "unlimited":
        return "Rate limit lifted: the queue starts jobs as fast as its credits allow."
    if done == "scaled":
        return f"Queue scaled: it runs up to {view.query.get('n', '?')} job(s) at once."
    if done == "deleted":
        return f"Deleted job {view.query.get('id', '?')}: its id is free again."
    if done in BULK_DONE:
        verb, kind = BULK_DONE[done]
        text = f"{verb} {view.query.get('n', '?')} job(s)."
        if view.query.get("more"):
            text += f" More remain: {kind} all again for the next batch."
        return text
    return NOTICES.get(done or "")


async def _gather(view: View, *calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``status`` (for the page header) and the page's ops, concurrently."""
    return list(await asyncio.gather(view.admin("status"),
                                     *(view.admin(op, **body) for op, body in calls)))


def _page(view: View, template: str, section: str, status: dict[str, Any],
          http_status: int = 200, **context: Any) -> Page:
    return view.page(template, http_status, section=section, status=status,
                     notice=notice(view), self_url=view.request.target, **context)


# ---- overview ---------------------------------------------------------------------------

async def overview(view: View) -> Page:
    status = await view.admin("status")
    if status["engine"] is None:  # the writer stopped: status is all that still answers
        return _page(view, "overview.html", "overview", status, engine=None)
    activity, queues, workers, actions, history = await asyncio.gather(
        view.admin("activity", limit=10), view.admin("queues"), view.admin("workers"),
        view.admin("actions", limit=10), view.admin("history", days=1))
    rows = activity["per_minute"]
    hour = {name: sum(row[name] for row in rows) for name in ("enqueued", "completed", "failed")}
    busiest = sorted(queues["queues"], key=lambda q: (-q["waiting"] - q["executing"], q["name"]))
    engine = status["engine"]
    return _page(view, "overview.html", "overview", status, engine=engine, hour=hour,
                 today=history["days"][-1],
                 chart=throughput(rows), latency_chart=latency(activity["queue_latency"]),
                 minutes=[row for row in rows if any(
                     row[name] for name in ("enqueued", "completed", "failed"))],
                 failures=activity["failures"], actions=actions["actions"],
                 queues=busiest[:10],
                 queue_count=len(busiest), workers=workers["workers"],
                 unserved=workers["unserved"],
                 waiting=sum(engine["jobs"]["by_state"][s]
                             for s in ("scheduled", "available", "retryable")))


# ---- jobs -------------------------------------------------------------------------------

def _trail(text: str | None) -> list[str]:
    parts = [] if not text else text.split(",")
    return [p for p in parts if p == "-" or _CURSOR.match(p)][-TRAIL_MAX:]


def jobs_url(filters: dict[str, str | None], cursor: str | None = None,
             trail: list[str] | None = None) -> str:
    params = {k: v for k, v in filters.items() if v}
    if cursor:
        params["cursor"] = cursor
    if trail:
        params["trail"] = ",".join(trail)
    return "/ui/jobs" + ("?" + urlencode(params) if params else "")


def admin_filters(filters: dict[str, str | None]) -> dict[str, Any]:
    """The page's filters as the ops take them: ``args`` (JSON text in the URL) as an
    object; text that is not one is refused like a bad filter of the op."""
    text = filters.get("args")
    if text is None:
        return filters
    try:
        args = json.loads(text)
    except ValueError:
        args = None
    if type(args) is not dict:
        raise AdminFailed(RequestRefused('args must be a JSON object, like {"account": 42}',
                                         code="invalid_request", field="args"))
    return {**filters, "args": args}


async def jobs(view: View) -> Page:
    query = view.query
    filters = {key: query.get(key) or None for key in JOB_FILTERS}
    cursor = query.get("cursor") or None
    trail = _trail(query.get("trail"))
    error = None
    status_call = asyncio.ensure_future(view.admin("status"))
    try:
        page = await view.admin("jobs", limit=PAGE_SIZE, cursor=cursor,
                                **admin_filters(filters))
    except AdminFailed as failed:
        if failed.failure.code != "invalid_request":
            status_call.cancel()
            raise
        error, page = failed.failure.message, {"jobs": [], "next_cursor": None}
    status = await status_call
    older = newer = None
    if page["next_cursor"] is not None:
        older = jobs_url(filters, page["next_cursor"], trail + [cursor or "-"])
    if cursor is not None:
        back = trail[-1] if trail else "-"
        newer = jobs_url(filters, None if back == "-" else back, trail[:-1])
    # attribute access on a namespace is the fast path of Jinja's lookup (a dict key is tried
    # only after getattr fails); this page renders 50 rows of ten fields
    rows = [SimpleNamespace(**row) for row in page["jobs"]]

    def bulk_link(kind: str) -> str | None:  # retry all, cancel all, delete all: the state's
        return bulk_url(kind, filters) if filters["state"] in BULK[kind][1] and rows \
            and not error else None

    return _page(view, "jobs.html", "jobs", status, rows=rows, filters=filters,
                 states=STATES, error=error, older=older, newer=newer,
                 first=jobs_url(filters) if cursor is not None else None,
                 page_number=len(trail) + 1 if cursor is not None else 1,
                 by_state=(status["engine"] or {}).get("jobs", {}).get("by_state", {}),
                 state_url=lambda state: jobs_url({**filters, "state": state}),
                 retry_url=bulk_link("retry"), cancel_url=bulk_link("cancel"),
                 delete_url=bulk_link("delete"),
                 search="", live=cursor is None, http_status=400 if error else 200)


async def find(view: View) -> Any:
    wanted = view.query.get("id", "").strip()
    if _JOB_ID.match(wanted):
        return redirect(f"/ui/jobs/{wanted.lower()}")
    status = await view.admin("status")
    return _page(view, "jobs.html", "jobs", status, 400, rows=[],
                 filters=dict.fromkeys(JOB_FILTERS), states=STATES,
                 error="A job ID is 32 hexadecimal characters (0-9, a-f).",
                 older=None, newer=None, first=None, page_number=1, retry_url=None,
                 cancel_url=None, delete_url=None,
                 by_state=(status["engine"] or {}).get("jobs", {}).get("by_state", {}),
                 state_url=lambda state: jobs_url({"state": state}), search=wanted,
                 live=False)


async def job(view: View, job_id: str) -> Page:
    status, reply = await _gather(view, ("job", {"job_id": job_id}))
    found = reply["job"]
    attempts = [{**attempt, "took": None if attempt["finished_at"] is None
                 or attempt["started_at"] is None
                 else attempt["finished_at"] - attempt["started_at"]}
                for attempt in reversed(found["attempts"])]
    code = (found["diagnostic"] or {}).get("code")
    return _page(view, "job.html", "jobs", status, job=found, attempts=attempts,
                 diagnostic_label=DIAGNOSTICS.get(code, "unknown outcome"),
                 can_retry=found["state"] in CAN_RETRY, can_cancel=found["state"] in CAN_CANCEL,
                 can_delete=found["state"] in DELETABLE,
                 live=found["state"] not in TERMINAL, quote=quote)


# ---- queues -----------------------------------------------------------------------------

async def queues(view: View) -> Page:
    status, reply, workers, activity = await _gather(
        view, ("queues", {}), ("workers", {}), ("activity", {"limit": 1}))
    series = activity["queue_throughput"]
    return _page(view, "queues.html", "queues", status, queues=reply["queues"], states=STATES,
                 unserved=workers["unserved"], throughput_chart=queue_throughput(series),
                 failed={row["queue"]: row["failed"] for row in series})


async def purge_confirm(view: View, queue: str) -> Page:
    status, reply = await _gather(view, ("queues", {}))
    found = next((q for q in reply["queues"] if q["name"] == queue), None)
    return _page(view, "purge.html", "queues", status, queue=queue,
                 waiting=0 if found is None else found["waiting"],
                 by_state=None if found is None else found["by_state"])


async def scale_form(view: View, queue: str) -> Page:
    view.back = "/ui/queues"
    status, reply = await _gather(view, ("queues", {}))
    found = next((q for q in reply["queues"] if q["name"] == queue), None)
    return _page(view, "scale.html", "queues", status, queue=queue, found=found,
                 credits_max=QUEUE_CREDITS_MAX)


# a rate limit's period as the form takes it: (unit, label, milliseconds), largest first
PERIOD_UNITS = (("h", "hours", 3_600_000), ("min", "minutes", 60_000), ("s", "seconds", 1_000),
                ("ms", "milliseconds", 1))


async def limit_form(view: View, queue: str) -> Page:
    view.back = "/ui/queues"
    status, reply = await _gather(view, ("queues", {}))
    found = next((q for q in reply["queues"] if q["name"] == queue), None)
    period_ms = found["rate_limit"]["period_ms"] if found and found["rate_limit"] else 1_000
    unit, _, size = next(u for u in PERIOD_UNITS if period_ms % u[2] == 0)
    return _page(view, "limit.html", "queues", status, queue=queue, found=found,
                 starts_max=RATE_STARTS_MAX, period_value=period_ms // size, period_unit=unit,
                 units=[(u, label) for u, label, _ in PERIOD_UNITS])


# kind -> (the admin op, the states it takes): "retry all" and "cancel all" on a jobs page
BULK = {"retry": ("retry_jobs", RETRIABLE), "cancel": ("cancel_jobs", CANCELLABLE),
        "delete": ("delete_jobs", DELETABLE)}


def bulk_url(kind: str, filters: dict[str, str | None]) -> str:
    return f"/ui/{kind}?" + urlencode({k: v for k, v in filters.items() if v})


def bulk_filters(view: View, kind: str) -> dict[str, str | None]:
    """The jobs a retry-all or cancel-all takes: ``state`` (one the op takes), ``queue``,
    ``task``, ``args``."""
    filters = {key: view.query.get(key) or None for key in JOB_FILTERS}
    states = BULK[kind][1]
    if filters["state"] not in states:
        raise RequestRefused(f"{kind} all takes state={', '.join(states[:-1])} or "
                             f"{states[-1]}", code="invalid_request", field="state")
    return filters


async def retry_confirm(view: View) -> Page:
    return await _bulk_confirm(view, "retry")


async def cancel_confirm(view: View) -> Page:
    return await _bulk_confirm(view, "cancel")


async def delete_confirm(view: View) -> Page:
    return await _bulk_confirm(view, "delete")


async def delete_job_confirm(view: View, job_id: str) -> Page:
    """A finished job's deletion, confirmed first (it cannot be undone)."""
    view.back = f"/ui/jobs/{quote(job_id, safe='')}"
    status, reply = await _gather(view, ("job", {"job_id": job_id}))
    return _page(view, "delete.html", "jobs", status, job=reply["job"],
                 deletable=reply["job"]["state"] in DELETABLE)


async def _bulk_confirm(view: View, kind: str) -> Page:
    filters = bulk_filters(view, kind)
    view.back = jobs_url(filters)
    status, queues = await _gather(view, ("queues", {}))
    state = filters["state"]
    count = None  # known from the counts unless a task, args or an error narrow it
    if filters["task"] is None and filters["args"] is None and filters["error"] is None:
        if filters["queue"] is None:
            count = ((status["engine"] or {}).get("jobs") or {}).get("by_state", {}).get(state)
        else:
            found = next((q for q in queues["queues"] if q["name"] == filters["queue"]), None)
            count = 0 if found is None else found["by_state"][state]
    return _page(view, "bulk.html", "jobs", status, kind=kind, filters=filters, count=count,
                 action_url=bulk_url(kind, filters), back_url=jobs_url(filters))


# ---- schedules, workers, storage ----------------------------------------------------------

async def schedules(view: View) -> Page:
    cursor = view.query.get("cursor") or None
    status, reply = await _gather(view, ("schedules", {"limit": PAGE_SIZE, "cursor": cursor}))
    return _page(view, "schedules.html", "schedules", status, schedules=reply["schedules"],
                 next_url=None if reply["next_cursor"] is None else
                 "/ui/schedules?" + urlencode({"cursor": reply["next_cursor"]}),
                 first_url="/ui/schedules" if cursor else None)


async def schedule(view: View, schedule_id: str) -> Page:
    status, reply = await _gather(view, ("schedule", {"schedule_id": schedule_id}))
    return _page(view, "schedule.html", "schedules", status, schedule=reply["schedule"])


async def workers(view: View) -> Page:
    status, reply = await _gather(view, ("workers", {}))
    executors = [w for w in reply["workers"] if w["mode"] != "client"]
    clients = [w for w in reply["workers"] if w["mode"] == "client"]
    # what runs now, the longest-running first (each executor lists its oldest ones)
    running = sorted(({**r, "worker": w["runtime_id"]} for w in executors for r in w["running"]),
                     key=lambda r: (r["started_at"] or 0, r["job_id"]))
    return _page(view, "workers.html", "workers", status, executors=executors,
                 clients=clients, unserved=reply["unserved"], running=running[:RUNNING_MAX],
                 running_total=sum(w["in_flight"] for w in executors))


async def tasks(view: View) -> Page:
    window = "hour" if view.query.get("window") == "hour" else "start"
    status, reply = await _gather(view, ("tasks", {"limit": TASKS_SHOWN, "window": window}))
    rows = [{**row, "failed_all": row["failed"] + row["timed_out"] + row["discarded"]}
            for row in reply["tasks"]]
    return _page(view, "tasks.html", "tasks", status, tasks=rows, more=reply["more"],
                 window=window, bounds=reply["run_bounds_ms"],
                 longest=reply["run_bounds_ms"][-1], pairs_max=reply["pairs_max"])


HISTORY_SPANS = (7, 30, 90, 180)  # the history page's choices of days (Sidekiq's)


async def history(view: View) -> Page:
    """What each UTC day saw, over 7, 30 (default), 90 or 180 days."""
    days = int(view.query["days"]) if view.query.get("days") in {str(n) for n in HISTORY_SPANS} \
        else 30
    status, reply = await _gather(view, ("history", {"days": days}))
    rows = reply["days"]
    return _page(view, "history.html", "history", status, days=days, spans=HISTORY_SPANS,
                 chart=history_chart(rows), rows=rows)


async def storage(view: View) -> Page:
    status = await view.admin("status")
    return _page(view, "storage.html", "storage", status, engine=status["engine"])
