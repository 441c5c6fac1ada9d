"""``tay enqueue TASK``: submit one job from a shell or a script, and with ``--wait`` wait
for its result (RQ's ``rq enqueue``).

A producer, not an operations op: it goes through the SDK (``Tay`` in client mode over
the Unix socket, or ``TayHTTP`` with ``--url`` and the TLS files), so the job is exactly
what an application's enqueue makes. Exit 0 when enqueued (with ``--wait``: completed),
1 when refused, unreachable, failed or still unfinished after ``--wait`` seconds, 2 for
usage (bad JSON args, a bad option).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def json_object(text: str) -> dict[str, Any]:
    """``--args``: a JSON object (the job's keyword arguments)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, like '{\"n\": 1}'")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def count(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="the task's name, as the worker registered it")
    parser.add_argument("--args", type=json_object, default={}, metavar="JSON",
                        help="the job's arguments, a JSON object (default {})")
    job = parser.add_argument_group("job options (docs/sdk.md)")
    job.add_argument("--queue", help="its queue (default: default)")
    job.add_argument("--delay", type=seconds, metavar="SECONDS",
                     help="run no sooner than this many seconds from now")
    job.add_argument("--retries", type=count, metavar="N",
                     help="re-run a failed attempt up to N times (default 0)")
    job.add_argument("--timeout", type=seconds, metavar="SECONDS",
                     help="the longest one attempt may run (default 30)")
    job.add_argument("--submission-id", metavar="KEY",
                     help="enqueueing again with this key and definition gives the same job")
    job.add_argument("--volatile", action="store_true",
                     help="keep the job in memory only (never written to disk)")
    parser.add_argument("--wait", type=seconds, metavar="SECONDS",
                        help="wait up to this long for the job to finish and print its result")


def run(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    import asyncio  # only this command runs a loop of its own

    from tay.errors import (ConnectionLost, RemoteTaskError, ResultTimeout, ServerError,
                            ValidationError)

    env = os.environ if environ is None else environ
    try:
        job_id, state, result, waited = asyncio.run(_submit(args, env))
    except ServerError as refused:
        return _fail(args, f"refused ({refused.code}): {refused}", refused.details)
    except ValidationError as bad:
        return _fail(args, f"refused: {bad}", None)
    except (ConnectionLost, OSError) as error:
        return _fail(args, f"no engine reachable: {error}", None)
    if isinstance(waited, RemoteTaskError):
        return _fail(args, f"job {job_id} failed: {waited.remote_type or waited.code}: "
                           f"{waited.remote_message or waited}", waited.details, job_id)
    if isinstance(waited, ResultTimeout):
        return _fail(args, f"job {job_id} is still {state} after {args.wait:g} s", None,
                     job_id)
    if args.json:
        document = {"job_id": job_id, "state": state}
        if args.wait is not None:
            document["result"] = result
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif args.wait is None:
        sys.stdout.write(f"enqueued {job_id} ({state})\n")
    else:
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


async def _submit(args: argparse.Namespace, env: Any) -> tuple[str, str, Any, Exception | None]:
    """(job id, state, result, what ended the wait: None, or a failure or a timeout)."""
    from tay.errors import RemoteTaskError, ResultTimeout
    from tay.sdk.client import Tay
    from tay.sdk.http import TayHTTP

    url = args.url or env.get("TAY_ADMIN_URL")
    client: Any
    if url:
        client = TayHTTP(url, tls_ca_file=args.tls_ca or env.get("TAY_ADMIN_TLS_CA"),
                         tls_cert_file=args.tls_cert or env.get("TAY_ADMIN_TLS_CERT"),
                         tls_key_file=args.tls_key or env.get("TAY_ADMIN_TLS_KEY"))
    else:
        client = Tay(mode="client", socket_path=args.socket)
    options = {name: value for name, value in (
        ("queue", args.queue), ("delay", args.delay), ("retries", args.retries),
        ("timeout", args.timeout), ("submission_id", args.submission_id)) if value is not None}
    async with client:
        handle = await client.enqueue(args.task, args.args, options=options,
                                      durability="volatile" if args.volatile else None)
        if args.wait is None:
            return handle.id, await handle.status(), None, None
        try:
            return handle.id, "completed", await handle.result(timeout=args.wait), None
        except (RemoteTaskError, ResultTimeout) as ended:
            return handle.id, await handle.status(), None, ended


def _fail(args: argparse.Namespace, message: str, details: Any, job_id: str | None = None) -> int:
    if args.json:
        sys.stdout.write(json.dumps({"job_id": job_id, "error": message, "details": details},
                                    indent=2, default=str) + "\n")
    else:
        print(f"tay enqueue: {message}", file=sys.stderr)
    return 1
