"""``tay status|enqueue|jobs|job|retry|retry-all|cancel|cancel-all|delete|delete-all|queues|
workers|tasks|history|quiet|unquiet|pause|resume|scale|limit|purge|schedules|schedule|
actions|compact``: see and
steer a running engine through the operations API (docs/admin.md); ``enqueue`` goes through
the SDK (tay.admin.enqueue).

Each command talks to the engine over the Unix socket (discovered like the SDK, or
``--socket``) or over HTTP(S) (``--url`` plus the TLS files for mTLS). ``--json`` prints the
engine's reply as one JSON document; otherwise a readable table. Exit codes: 0 done,
1 refused or unreachable (the message says which), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from tay.engine.bulk_states import CANCELLABLE, DELETABLE, RETRIABLE

from .render import (credits, period_ms, rate, render_actions, render_job, render_jobs,
                     render_history, render_queues, render_schedule, render_schedules,
                     render_status, render_tasks, render_workers, when)

STATES = ("scheduled", "available", "executing", "retryable", "completed", "cancelled",
          "discarded")
PURGE_BATCH = 10_000
BULK_BATCH = 1_000  # jobs per retry_jobs / cancel_jobs request: each batch is one commit
WAITING = ("scheduled", "available", "retryable")  # cancel-all waiting: each in turn
COMPACTION_POLL_S = 0.5  # how often `tay compact` reads status once its request timed out


def _connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("where the engine is")
    group.add_argument("--socket", metavar="PATH",
                       help="Unix socket of the engine; default: the SDK's discovery "
                            "(TAY_SOCKET_PATH, /run/tay/tay.sock, ...)")
    group.add_argument("--url", metavar="URL",
                       help="HTTP(S) base URL of a remote engine instead of the socket "
                            "(TAY_ADMIN_URL)")
    group.add_argument("--tls-ca", metavar="FILE", help="CA file for https (TAY_ADMIN_TLS_CA)")
    group.add_argument("--tls-cert", metavar="FILE",
                       help="client certificate for mTLS (TAY_ADMIN_TLS_CERT)")
    group.add_argument("--tls-key", metavar="FILE", help="its private key (TAY_ADMIN_TLS_KEY)")
    parser.add_argument("--json", action="store_true", help="print the reply as JSON")


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _args_object(text: str) -> dict[str, Any]:
    """``--args``: the top-level args a job must hold, as a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if type(value) is not dict or not value:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a JSON object with at least "
                                         "one key, like '{\"account\": 42}'")
    return value


def _job_filter_options(parser: argparse.ArgumentParser, verb: str | None = None) -> None:
    """``--queue``, ``--task``, ``--args`` and ``--error`` (the filters of ``jobs`` and the
    bulk ops), and for a bulk command (``verb``) its ``--limit``."""
    parser.add_argument("--queue", help="only jobs of this queue")
    parser.add_argument("--task", help="only jobs of this task")
    parser.add_argument("--args", type=_args_object, help=(
        "only jobs whose args hold these top-level keys with equal values, a JSON object "
        "like '{\"account\": 42}'"))
    parser.add_argument("--error", help="only jobs whose last failure's type or message "
                        "contains this text (any case)")
    if verb is not None:
        parser.add_argument("--limit", type=_positive, help=f"{verb} at most this many "
                            "(default: all), most recently changed first")


def _concurrency(text: str) -> int | None:
    """``scale``'s credits: an integer in 1..65,536, or ``configured`` (None)."""
    from tay.storage.events.operations import QUEUE_CREDITS_MAX  # the (24,2) bound

    if text == "configured":
        return None
    value = _positive(text)
    if value > QUEUE_CREDITS_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {QUEUE_CREDITS_MAX:,}, got {value}")
    return value


def _rate(text: str) -> tuple[int | None, int | None]:
    """``limit``'s rate: ``STARTS/PERIOD`` (``10/1s``, ``600/1m``, ``5/500ms``), or ``none``."""
    from tay.storage.events.operations import RATE_PERIOD_MAX_MS, RATE_STARTS_MAX  # (28,2)

    if text == "none":
        return None, None
    starts_text, _, period_text = text.partition("/")
    period = period_ms(period_text)
    if not starts_text.isdigit() or period is None:
        raise argparse.ArgumentTypeError(f"expected STARTS/PERIOD such as 10/1s, 600/1m or "
                                         f"5/500ms, or none; got {text!r}")
    starts = int(starts_text)
    if not 1 <= starts <= RATE_STARTS_MAX:
        raise argparse.ArgumentTypeError(f"starts must be 1..{RATE_STARTS_MAX:,}, got {starts}")
    if not 1 <= period <= RATE_PERIOD_MAX_MS:
        raise argparse.ArgumentTypeError(f"the period must be 1 ms..24h, got {period_text}")
    return starts, period


def register(groups: Any) -> None:
    """Add the operations commands as top-level ``tay`` commands."""
    def command(name: str, help_text: str, run: Callable[..., int]) -> argparse.ArgumentParser:
        parser = groups.add_parser(name, help=help_text, description=help_text)
        _connection_options(parser)
        parser.set_defaults(handler=lambda args: _run(args, run))
        return parser

    command("status", "engine status: version, durability, jobs, storage, workers", _status)
    enqueue = groups.add_parser("enqueue", help="submit one job (and with --wait, wait for "
                                "its result)", description="submit one job, as an "
                                "application's enqueue would, and with --wait wait for its "
                                "result")
    _connection_options(enqueue)
    from . import enqueue as enqueue_command

    enqueue_command.add_arguments(enqueue)
    enqueue.set_defaults(handler=enqueue_command.run)
    jobs = command("jobs", "list jobs, most recently changed first", _jobs)
    jobs.add_argument("--state", choices=STATES, help="only jobs in this state")
    _job_filter_options(jobs)
    jobs.add_argument("--limit", type=_positive, default=50, help="jobs per page, 1..100 (default 50)")
    jobs.add_argument("--cursor", help="continue after a previous page (its next_cursor)")
    command("job", "one job in full: definition, args, attempts, failure, result",
            _job).add_argument("job_id", metavar="ID")
    command("retry", "retry a retryable, discarded or cancelled job, or run a scheduled "
            "one now", _retry).add_argument(
        "job_id", metavar="ID")
    retry_all = command("retry-all", "retry every discarded, cancelled or retryable job, or "
                        "run every scheduled one now (of a queue, of a task), in batches",
                        _retry_all)
    retry_all.add_argument("state", choices=RETRIABLE)
    _job_filter_options(retry_all, "retry")
    command("cancel", "cancel a waiting or running job", _cancel).add_argument("job_id", metavar="ID")
    cancel_all = command("cancel-all", "cancel every job in a state (of a queue, of a task), "
                         "in batches; running ones are told to stop", _cancel_all)
    cancel_all.add_argument("state", choices=("waiting", *CANCELLABLE),
                            help="waiting: scheduled, available and retryable")
    _job_filter_options(cancel_all, "cancel")
    command("delete", "delete a completed, discarded or cancelled job (its id is free "
            "again; the next compaction leaves its records out)", _delete).add_argument(
        "job_id", metavar="ID")
    delete_all = command("delete-all", "delete every job in a finished state (of a queue, "
                         "of a task), in batches", _delete_all)
    delete_all.add_argument("state", choices=DELETABLE)
    _job_filter_options(delete_all, "delete")
    command("queues", "queues: depth by state, credits, executing, paused", _queues)
    command("workers", "connected workers, what each runs now, tasks nobody serves", _workers)
    tasks = command("tasks", "each task of each queue since start (or in the last hour): "
                    "outcomes and run times (mean, p50, p95, p99), executors that serve it",
                    _tasks)
    tasks.add_argument("--limit", type=_positive, default=100,
                       help="(queue, task) pairs, the busiest first, 1..1000 (default 100)")
    tasks.add_argument("--last-hour", action="store_true",
                       help="what each task did in the last hour, not since start")
    history = command("history", "what each UTC day saw, today last: jobs enqueued, "
                      "executions completed and failed (kept across restarts)", _history)
    history.add_argument("--days", type=_positive, default=30,
                         help="days to show, 1..3660 (default 30)")
    command("quiet", "offer a worker no new job (every connection of its runtime id; what "
            "it runs finishes), e.g. before stopping it", _quiet).add_argument(
        "runtime_id", metavar="RUNTIME_ID")
    command("unquiet", "offer a quiet worker jobs again", _unquiet).add_argument(
        "runtime_id", metavar="RUNTIME_ID")
    command("pause", "pause a queue (durable; running jobs finish)", _pause).add_argument("queue")
    command("resume", "resume a paused queue", _resume).add_argument("queue")
    scale = command("scale", "set a queue's credits (executions at once) at runtime; "
                    "durable, over the configured ones", _scale)
    scale.add_argument("queue")
    scale.add_argument("concurrency", metavar="N|configured", type=_concurrency,
                       help="1..65,536, or 'configured' to go back to the configured credits")
    limit = command("limit", "rate-limit a queue: at most STARTS job starts in any PERIOD "
                    "(durable; none lifts it)", _limit)
    limit.add_argument("queue")
    limit.add_argument("rate", metavar="STARTS/PERIOD|none", type=_rate,
                       help="e.g. 10/1s, 600/1m, 5/500ms (up to 10,000 per period of up to "
                       "24h), or none")
    purge = command("purge", "cancel every waiting job of a queue", _purge)
    purge.add_argument("queue")
    purge.add_argument("--limit", type=_positive, help="cancel at most this many (default: all)")
    schedules = command("schedules", "list schedules in ID order: rule, next and last "
                        "occurrence", _schedules)
    schedules.add_argument("--limit", type=_positive, default=50,
                           help="schedules per page, 1..100 (default 50)")
    schedules.add_argument("--cursor", help="continue after a previous page (its next_cursor)")
    schedule = groups.add_parser("schedule", help="show, pause, resume, run or cancel one "
                                 "schedule", description="show, pause, resume, run or cancel "
                                 "one schedule")
    actions = schedule.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, help_text, run in (
            ("show", "one schedule in full: rule, args, next occurrences, last job", _schedule),
            ("cancel", "cancel a schedule: no further occurrences (admitted jobs still run)",
             _cancel_schedule),
            ("run", "enqueue one job of the schedule's task, args and options now "
             "(outside its cadence)", _run_schedule),
            ("pause", "deliver no occurrence until resumed (durable; admitted jobs still run)",
             _pause_schedule),
            ("resume", "deliver occurrences again from the next due time (the ones missed "
             "while paused are skipped)", _resume_schedule)):
        action = actions.add_parser(name, help=help_text, description=help_text)
        _connection_options(action)
        action.add_argument("schedule_id", metavar="ID")
        action.set_defaults(handler=lambda args, run=run: _run(args, run))
    actions = command("actions", "the last operator actions (retry, cancel, pause, ...): "
                      "when, from where, what they did; newest first", _actions)
    actions.add_argument("--limit", type=_positive, default=50,
                         help="actions, 1..1000 (default 50)")
    compact = command("compact", "compact the store now (online Store-v2 compaction; "
                      "writes pause only for the switch)", _compact)
    compact.add_argument("--terminal-retention", metavar="infinity|<N>m|<N>h|<N>d",
                         help="apply this retention and store it (default: the store's own)")


def client_for(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Any:
    from .client import HttpAdmin, SocketAdmin

    env = os.environ if environ is None else environ
    url = args.url or env.get("TAY_ADMIN_URL")
    if url:
        return HttpAdmin(url, args.tls_ca or env.get("TAY_ADMIN_TLS_CA"),
                         args.tls_cert or env.get("TAY_ADMIN_TLS_CERT"),
                         args.tls_key or env.get("TAY_ADMIN_TLS_KEY"))
    return SocketAdmin(args.socket)


def _run(args: argparse.Namespace, run: Callable[..., int]) -> int:
    from .client import AdminRefused, AdminUnreachable

    client = None
    try:
        client = client_for(args)
        return run(client, args)
    except AdminRefused as refused:
        if args.json:
            _print_json({"error": refused.error})
        else:
            print(f"tay {args.group}: refused ({refused.code}): {refused}", file=sys.stderr)
        return 1
    except AdminUnreachable as error:
        print(f"tay {args.group}: no engine reachable: {error}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def _show(args: argparse.Namespace, reply: dict[str, Any], render: Callable[[dict], str]) -> int:
    if args.json:
        _print_json(reply)
    else:
        sys.stdout.write(render(reply))
    return 0


def _status(client: Any, args: argparse.Namespace) -> int:
    return _show(args, client.call("status", {}), render_status)


def _jobs(client: Any, args: argparse.Namespace) -> int:
    if args.limit > 100:
        print("tay jobs: --limit must be 1..100", file=sys.stderr)
        return 2
    body = {"state": args.state, "queue": args.queue, "task": args.task, "args": args.args,
            "error": args.error, "limit": args.limit, "cursor": args.cursor}
    return _show(args, client.call("jobs", {k: v for k, v in body.items() if v is not None}),
                 render_jobs)


def _job(client: Any, args: argparse.Namespace) -> int:
    return _show(args, client.call("job", {"job_id": args.job_id}), render_job)


def _retry(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("retry_job", {"job_id": args.job_id})
    return _show(args, reply, lambda r: f"retried {r['job']['id']}: now {r['job']['state']}\n")


def _retry_all(client: Any, args: argparse.Namespace) -> int:
    """Retry in batches, following the cursor: the jobs that were in the state when it
    began, each once (one that fails back into the state meanwhile is not retried again)."""
    filters = _job_filters(args)
    retried = _in_batches(client, "retry_jobs", {"state": args.state, **filters}, "retried",
                          args.limit)
    where = _where(filters)
    return _show(args, {"state": args.state, **filters, "retried": retried},
                 lambda r: f"{r['retried']} {args.state} job(s){where} "
                 f"{'run now' if args.state == 'scheduled' else 'retried'}\n")


def _cancel_all(client: Any, args: argparse.Namespace) -> int:
    """Cancel in batches, following each state's cursor (``waiting``: scheduled, available
    and retryable in turn); running ones are told to stop."""
    wanted = args.limit
    filters = _job_filters(args)
    cancelled = 0
    for state in WAITING if args.state == "waiting" else (args.state,):
        cancelled += _in_batches(client, "cancel_jobs", {"state": state, **filters},
                                 "cancelled", None if wanted is None else wanted - cancelled)
    where = _where(filters)
    return _show(args, {"state": args.state, **filters, "cancelled": cancelled},
                 lambda r: f"{r['cancelled']} {args.state} job(s){where} cancelled\n")


def _delete(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("delete_job", {"job_id": args.job_id})
    return _show(args, reply, lambda r: f"deleted {r['job']['id']} ({r['job']['state']})\n")


def _delete_all(client: Any, args: argparse.Namespace) -> int:
    filters = _job_filters(args)
    deleted = _in_batches(client, "delete_jobs", {"state": args.state, **filters}, "deleted",
                          args.limit)
    return _show(args, {"state": args.state, **filters, "deleted": deleted},
                 lambda r: f"{r['deleted']} {args.state} job(s){_where(filters)} deleted\n")


def _job_filters(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in ("queue", "task", "args", "error")
            if getattr(args, name) is not None}


def _where(filters: Mapping[str, Any]) -> str:
    """The filters as the summary line says them: `` queue mail args {"account": 42}``
    (args and error as JSON: an error's text may hold spaces)."""
    return "".join(f" {name} {json.dumps(value) if name in ('args', 'error') else value}"
                   for name, value in filters.items())


def _in_batches(client: Any, op: str, body: dict[str, Any], counted: str,
                wanted: int | None) -> int:
    """``op`` (retry_jobs, cancel_jobs) on ``body`` in batches, following its cursor to the
    end or until ``wanted`` jobs were done (None: all); how many were."""
    done, cursor = 0, None
    while wanted is None or done < wanted:
        batch = BULK_BATCH if wanted is None else min(BULK_BATCH, wanted - done)
        reply = client.call(op, {**body, "limit": batch,
                                 **({"cursor": cursor} if cursor else {})})
        done += reply[counted]
        cursor = reply["next_cursor"]
        if cursor is None:
            break
    return done


def _cancel(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("cancel_job", {"job_id": args.job_id})
    return _show(args, reply, lambda r: f"cancelled {r['job']['id']}: now {r['job']['state']}\n")


def _queues(client: Any, args: argparse.Namespace) -> int:
    return _show(args, client.call("queues", {}), render_queues)


def _tasks(client: Any, args: argparse.Namespace) -> int:
    if args.limit > 1_000:
        print("tay tasks: --limit must be 1..1000", file=sys.stderr)
        return 2
    window = "hour" if args.last_hour else "start"
    return _show(args, client.call("tasks", {"limit": args.limit, "window": window}),
                 render_tasks)


def _history(client: Any, args: argparse.Namespace) -> int:
    if args.days > 3_660:
        print("tay history: --days must be 1..3660", file=sys.stderr)
        return 2
    return _show(args, client.call("history", {"days": args.days}), render_history)


def _actions(client: Any, args: argparse.Namespace) -> int:
    if args.limit > 1_000:
        print("tay actions: --limit must be 1..1000", file=sys.stderr)
        return 2
    return _show(args, client.call("actions", {"limit": args.limit}), render_actions)


def _workers(client: Any, args: argparse.Namespace) -> int:
    return _show(args, client.call("workers", {}),
                 lambda r: render_workers(r, time.time_ns() // 1_000_000))


def _quiet(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("quiet_worker", {"runtime_id": args.runtime_id})
    return _show(args, reply, lambda r: f"worker {r['runtime_id']} is quiet: "
                 f"{sum(w['in_flight'] for w in r['workers'])} execution(s) still running, "
                 "nothing new offered\n")


def _unquiet(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("unquiet_worker", {"runtime_id": args.runtime_id})
    return _show(args, reply, lambda r: f"worker {r['runtime_id']} is offered jobs again\n")


def _pause(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("pause_queue", {"queue": args.queue})
    return _show(args, reply, lambda r: f"queue {r['queue']['name']} paused "
                                        f"({r['queue']['waiting']} waiting)\n")


def _resume(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("resume_queue", {"queue": args.queue})
    return _show(args, reply, lambda r: f"queue {r['queue']['name']} resumed "
                                        f"({r['queue']['waiting']} waiting)\n")


def _scale(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("scale_queue", {"queue": args.queue, "concurrency": args.concurrency})
    return _show(args, reply, lambda r: f"queue {r['queue']['name']}: {credits(r['queue'])} "
                                        f"({r['queue']['executing']} executing)\n")


def _limit(client: Any, args: argparse.Namespace) -> int:
    starts, period = args.rate
    reply = client.call("limit_queue", {"queue": args.queue, "starts": starts,
                                        "period_ms": period})
    return _show(args, reply, lambda r: f"queue {r['queue']['name']}: rate limit "
                                        f"{rate(r['queue'])}\n")


def _purge(client: Any, args: argparse.Namespace) -> int:
    """Cancel waiting jobs in batches until none remain (or ``--limit`` are done)."""
    wanted = args.limit
    purged = 0
    reply: dict[str, Any] = {}
    while wanted is None or purged < wanted:
        batch = PURGE_BATCH if wanted is None else min(PURGE_BATCH, wanted - purged)
        reply = client.call("purge_queue", {"queue": args.queue, "limit": batch})
        purged += reply["purged"]
        if reply["purged"] == 0 or reply["remaining"] == 0:
            break
    summary = {**reply, "purged": purged}
    return _show(args, summary, lambda r: f"queue {args.queue}: {r['purged']} waiting job(s) "
                                          f"cancelled, {r['remaining']} still waiting\n")


def _schedules(client: Any, args: argparse.Namespace) -> int:
    if args.limit > 100:
        print("tay schedules: --limit must be 1..100", file=sys.stderr)
        return 2
    body = {"limit": args.limit, "cursor": args.cursor}
    return _show(args, client.call("schedules", {k: v for k, v in body.items() if v is not None}),
                 render_schedules)


def _schedule(client: Any, args: argparse.Namespace) -> int:
    return _show(args, client.call("schedule", {"schedule_id": args.schedule_id}),
                 render_schedule)


def _cancel_schedule(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("cancel_schedule", {"schedule_id": args.schedule_id})
    return _show(args, reply, lambda r: f"schedule {r['schedule']['id']} cancelled at "
                                        f"{when(r['schedule']['cancelled_at'])}\n")


def _run_schedule(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("run_schedule", {"schedule_id": args.schedule_id})
    return _show(args, reply, lambda r: f"schedule {r['schedule']['id']}: enqueued job "
                                        f"{r['job']['id']} ({r['job']['state']})\n")


def _pause_schedule(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("pause_schedule", {"schedule_id": args.schedule_id})
    return _show(args, reply, lambda r: f"schedule {r['schedule']['id']} paused\n")


def _resume_schedule(client: Any, args: argparse.Namespace) -> int:
    reply = client.call("resume_schedule", {"schedule_id": args.schedule_id})
    return _show(args, reply, lambda r: f"schedule {r['schedule']['id']} resumed; next "
                                        f"{when(r['schedule']['next_at'])}\n")


def _compact(client: Any, args: argparse.Namespace) -> int:
    from .client import AdminRefused, AdminTimeout

    body = {} if args.terminal_retention is None else {
        "terminal_retention": args.terminal_retention}
    before = client.call("status", {})["storage"]
    try:
        report = client.call("compact", body)
    except AdminRefused as refused:
        if refused.code != "request_timeout":
            raise
        # the engine answers at its request deadline while the compaction carries on:
        # follow it in status until it has ended, then report its outcome like the reply would
        report = _await_compaction(client, before)
    except AdminTimeout:  # the client's own timeout came first: the same, on a new connection
        report = _await_compaction(client, before)
    return _show(args, report, lambda r: (
        f"compacted: epoch {r['epoch_id']}, {r['retained_jobs']} jobs kept, "
        f"{r['expired_jobs']} expired, history {r['bytes_before']} -> {r['bytes_after']} "
        f"bytes, {r['duration_ms']} ms (writes paused {r['pause_ms']:.1f} ms)\n"))


def _await_compaction(client: Any, before: Mapping[str, Any]) -> dict[str, Any]:
    """The report of the compaction that ended after ``before`` (a ``status.storage``)."""
    from .client import AdminRefused

    print("tay compact: still compacting after the engine's request deadline; waiting for "
          "the outcome in `tay status`", file=sys.stderr)
    while True:
        storage = client.call("status", {})["storage"]
        if not storage["compaction"]["running"]:
            break
        time.sleep(COMPACTION_POLL_S)
    if storage["last_compaction"] != before["last_compaction"]:
        return dict(storage["last_compaction"])
    failure = storage["compaction"]["last_failure"]
    if failure is not None and failure != before["compaction"]["last_failure"]:
        raise AdminRefused("compaction_failed", str(failure.get("error", "")),
                           {"code": "compaction_failed", "message": failure.get("error", ""),
                            "last_failure": failure})
    raise AdminRefused("request_timeout", "the compaction ended without a report in status; "
                       "see `tay status`", {"code": "request_timeout"})