"""The dashboard's actions (POST, CSRF-checked in ``app``): one admin op each, then a 303
back to the page that shows the result, so a reload never repeats the action. A refusal
(for example retrying a completed job) renders the engine's reason with the op's status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from tay.failures import RequestRefused

from .view import AdminFailed, redirect

if TYPE_CHECKING:
    from tay.protocol.http_api import HttpResponse

    from .view import View


def _job_url(job_id: str) -> str:
    return f"/ui/jobs/{quote(job_id, safe='')}"


async def retry_job(view: View, job_id: str) -> HttpResponse:
    view.back = _job_url(job_id)
    await view.admin("retry_job", job_id=job_id)
    return redirect(f"{_job_url(job_id)}?done=retried")


async def cancel_job(view: View, job_id: str) -> HttpResponse:
    view.back = _job_url(job_id)
    await view.admin("cancel_job", job_id=job_id)
    return redirect(f"{_job_url(job_id)}?done=cancelled")


async def delete_job(view: View, job_id: str) -> HttpResponse:
    view.back = _job_url(job_id)
    await view.admin("delete_job", job_id=job_id)
    return redirect(f"/ui/jobs?{urlencode({'done': 'deleted', 'id': job_id})}")


BULK_MAX = 10_000  # jobs one confirmation retries, cancels or deletes (as a purge cancels)


async def retry_jobs(view: View) -> HttpResponse:
    return await _bulk(view, "retry", "retried")


async def cancel_jobs(view: View) -> HttpResponse:
    return await _bulk(view, "cancel", "cancelled")


async def delete_jobs(view: View) -> HttpResponse:
    return await _bulk(view, "delete", "deleted")


async def _bulk(view: View, kind: str, done_field: str) -> HttpResponse:
    """Retries, cancels or deletes the jobs of a state (queue, task, args) in batches,
    following the op's cursor, up to ``BULK_MAX`` per confirmation: each job once, even one
    that fails back."""
    from .pages import BULK, admin_filters, bulk_filters, jobs_url

    filters = bulk_filters(view, kind)
    view.back = jobs_url(filters)
    count, cursor = 0, None
    while count < BULK_MAX:
        reply = await view.admin(BULK[kind][0], **admin_filters(filters), cursor=cursor,
                                 limit=min(1_000, BULK_MAX - count))
        count += reply[done_field]
        cursor = reply["next_cursor"]
        if cursor is None:
            break
    done = {"done": f"{done_field}_all", "n": count, **({"more": 1} if cursor else {})}
    return redirect(f"{jobs_url(filters)}&{urlencode(done)}")  # the state is always there


async def _act(view: View, page: str, op: str, done: str, **body: Any) -> HttpResponse:
    """``op`` with ``body``, then ``page`` with the ``done`` notice (a refusal links back
    to ``page``)."""
    view.back = page
    await view.admin(op, **body)
    return redirect(f"{page}?done={done}")


async def quiet_worker(view: View, runtime_id: str) -> HttpResponse:
    return await _act(view, "/ui/workers", "quiet_worker", "quiet", runtime_id=runtime_id)


async def unquiet_worker(view: View, runtime_id: str) -> HttpResponse:
    return await _act(view, "/ui/workers", "unquiet_worker", "unquiet", runtime_id=runtime_id)


async def pause_queue(view: View, queue: str) -> HttpResponse:
    return await _act(view, "/ui/queues", "pause_queue", "paused", queue=queue)


async def resume_queue(view: View, queue: str) -> HttpResponse:
    return await _act(view, "/ui/queues", "resume_queue", "resumed", queue=queue)


async def scale_queue(view: View, queue: str) -> HttpResponse:
    """The form's ``concurrency``: an integer, or ``configured`` (the op's null)."""
    view.back = f"/ui/queues/{quote(queue, safe='')}/scale"
    text = view.form.get("concurrency", "").strip()
    if text == "configured":
        concurrency = None
    elif text.isdigit() and len(text) <= 6:
        concurrency = int(text)
    else:
        # refused like the engine's own refusals: a page that links back to the form
        raise AdminFailed(RequestRefused("concurrency must be a whole number of credits",
                                         code="invalid_request", field="concurrency"))
    reply = await view.admin("scale_queue", queue=queue, concurrency=concurrency)
    return redirect(f"/ui/queues?{urlencode({'done': 'scaled', 'n': reply['queue']['credits']})}")


async def limit_queue(view: View, queue: str) -> HttpResponse:
    """The form's ``starts`` and ``period`` in ``unit``, or ``starts=none`` (no limit)."""
    from .format import duration
    from .pages import PERIOD_UNITS

    view.back = f"/ui/queues/{quote(queue, safe='')}/limit"
    starts_text = view.form.get("starts", "").strip()
    if starts_text == "none":
        await view.admin("limit_queue", queue=queue, starts=None, period_ms=None)
        return redirect("/ui/queues?done=unlimited")
    period_text = view.form.get("period", "").strip()
    size = {unit: ms for unit, _, ms in PERIOD_UNITS}.get(view.form.get("unit", "s"))
    if not (starts_text.isdigit() and period_text.isdigit() and size is not None
            and len(starts_text) <= 9 and len(period_text) <= 9):
        raise AdminFailed(RequestRefused("starts and the period must be whole numbers",
                                         code="invalid_request", field="starts"))
    reply = await view.admin("limit_queue", queue=queue, starts=int(starts_text),
                             period_ms=int(period_text) * size)
    limit = reply["queue"]["rate_limit"]
    return redirect("/ui/queues?" + urlencode({"done": "limited", "n": limit["starts"],
                                               "period": duration(limit["period_ms"])}))


async def purge_queue(view: View, queue: str) -> HttpResponse:
    """Cancels up to 10,000 waiting jobs per confirmation (the op's largest batch)."""
    view.back = "/ui/queues"
    reply = await view.admin("purge_queue", queue=queue, limit=10_000)
    query = urlencode({"done": "purged", "n": reply["purged"], "left": reply["remaining"]})
    return redirect(f"/ui/queues?{query}")


async def run_schedule(view: View, schedule_id: str) -> HttpResponse:
    """One job of the schedule's definition now; the new job's page shows it."""
    view.back = f"/ui/schedules/{quote(schedule_id, safe='')}"
    reply = await view.admin("run_schedule", schedule_id=schedule_id)
    return redirect(f"{_job_url(reply['job']['id'])}?done=schedule_run")


async def cancel_schedule(view: View, schedule_id: str) -> HttpResponse:
    return await _schedule_action(view, schedule_id, "cancel_schedule", "schedule_cancelled")


async def pause_schedule(view: View, schedule_id: str) -> HttpResponse:
    return await _schedule_action(view, schedule_id, "pause_schedule", "schedule_paused")


async def resume_schedule(view: View, schedule_id: str) -> HttpResponse:
    return await _schedule_action(view, schedule_id, "resume_schedule", "schedule_resumed")


async def _schedule_action(view: View, schedule_id: str, op: str, done: str) -> HttpResponse:
    """``op`` on the schedule, then its page with the ``done`` notice."""
    return await _act(view, f"/ui/schedules/{quote(schedule_id, safe='')}", op, done,
                      schedule_id=schedule_id)


async def compact(view: View) -> HttpResponse:
    return await _act(view, "/ui/storage", "compact", "compacted")
