"""``tay serve``: flags and environment variables -> ``ServeConfig`` -> the server.

Every bad value exits with status 2 and a message naming the option (flag or variable).
Environment variables apply when the flag is absent; flags win.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tay.failures import ConfigurationError, StorageFailure

if TYPE_CHECKING:
    from .app import ServeConfig

# The server stack (engine, storage, uvloop) is imported only when `serve` runs, so other
# `tay` commands stay light.

_SIZE = re.compile(r"^\s*(\d+)\s*(KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNITS = {None: 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_TRUE, _FALSE = ("true", "TRUE", "1"), ("false", "FALSE", "0")


def register(groups: Any) -> None:
    parser = groups.add_parser("serve", help="run the engine with its Unix-socket and HTTP listeners")
    add = parser.add_argument
    add("--data-dir", help="store directory (TAY_DATA_DIR)")
    add("--socket", metavar="PATH|off", help="socket path or off (TAY_SOCKET_PATH)")
    add("--socket-mode", choices=("0600", "0660"), default="0600")
    add("--init-if-missing", action="store_true", default=None,
        help="create an empty store if none exists (TAY_INITIALIZE_IF_MISSING)")
    add("--durability", choices=("sync", "write"), default="sync")
    add("--validated-filesystem", action="store_true")
    add("--group-commit-max-events", type=int, default=1)
    add("--group-commit-interval-ms",
        help="0..1000, default 0: the longest a group-commit batch waits to fill; batches are "
             "written as soon as no input is ready (TAY_GROUP_COMMIT_INTERVAL_MS)")
    add("--group-commit-linger", action="store_true", default=None,
        help="wait the whole interval for a batch to fill instead of writing once no input "
             "is ready: fewer fsyncs, more latency; needs max events > 1 and interval > 0 "
             "(default off; TAY_GROUP_COMMIT_LINGER)")
    add("--queue", action="append", default=[], metavar="NAME=CREDITS",
        help="queue concurrency, repeatable (TAY_QUEUES=alpha=2,beta=2)")
    add("--default-queue-concurrency", help="1..65536 (TAY_DEFAULT_QUEUE_CONCURRENCY)")
    add("--max-state-bytes", help="bytes, KB/MB/GB/KiB/MiB/GiB allowed (TAY_MAX_STATE_BYTES)")
    add("--max-history-bytes", help="cap on all segment bytes, size suffixes allowed; "
                                     "unset: unlimited (TAY_MAX_HISTORY_BYTES)")
    add("--max-segments", help="cap on segment files; unset: unlimited (TAY_MAX_SEGMENTS)")
    add("--client-slots", type=int, default=64)
    add("--client-bytes", type=int, default=64 * 1024 * 1024)
    add("--max-frame-bytes", type=int, default=1_048_576)
    add("--max-connections", type=int, default=128)
    add("--executor-result-bytes", type=int, default=65_536,
        help="largest encoded result an executor may report")
    add("--request-timeout-ms", type=int, default=30_000,
        help="per pending socket request, 1..3600000 (answers request_timeout on expiry)")
    add("--log-level", default="INFO", type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
    from .http_config import add_http_arguments

    add_http_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from .http_config import apply_http

        env = os.environ if environ is None else environ
        config, http = apply_http(args, env, build_config(args, env))
        config = fit_replies(config, http)
    except ConfigurationError as error:
        print(f"tay serve: {error.message}", file=sys.stderr)
        return 2
    try:
        from .app import run_serve  # HTTP off: httptools and ssl are not imported at all

        return run_serve(config, http)
    except ConfigurationError as error:
        print(f"tay serve: {error.message}", file=sys.stderr)
        return 2
    except StorageFailure as failure:
        from .preflight import explain

        print(f"tay serve: {explain(failure, config.data_dir)}", file=sys.stderr)
        return 1


def build_config(args: argparse.Namespace, env: Mapping[str, str]) -> "ServeConfig":
    from tay.engine.config import EngineConfig
    from tay.protocol.limits import ProtocolLimits

    from .app import ServeConfig
    from .socket_path import resolve_socket_path

    data_dir = args.data_dir or env.get("TAY_DATA_DIR")
    if not data_dir:
        raise ConfigurationError("--data-dir", "required (or set TAY_DATA_DIR)")
    data_dir = os.path.abspath(data_dir)
    init = args.init_if_missing or _flag("TAY_INITIALIZE_IF_MISSING",
                                         env.get("TAY_INITIALIZE_IF_MISSING", "false"))
    interval = parse_int("--group-commit-interval-ms",
                    args.group_commit_interval_ms or env.get("TAY_GROUP_COMMIT_INTERVAL_MS", "0"),
                    0, 1_000)
    parse_int("--group-commit-max-events", args.group_commit_max_events, 1, 1_000_000)
    linger = bool(getattr(args, "group_commit_linger", None) or _flag(
        "TAY_GROUP_COMMIT_LINGER", env.get("TAY_GROUP_COMMIT_LINGER", "false")))
    if linger and (args.group_commit_max_events < 2 or interval < 1):
        raise ConfigurationError("--group-commit-linger",
                                 "needs --group-commit-max-events > 1 and "
                                 "--group-commit-interval-ms > 0")
    queues = parse_queues(args.queue, env.get("TAY_QUEUES"))
    default_credits = parse_int("--default-queue-concurrency", args.default_queue_concurrency
                           or env.get("TAY_DEFAULT_QUEUE_CONCURRENCY", "10"), 1, 65_536)
    state_bytes = parse_size("--max-state-bytes",
                             args.max_state_bytes or env.get("TAY_MAX_STATE_BYTES", "268435456"))
    history_text = getattr(args, "max_history_bytes", None) or env.get("TAY_MAX_HISTORY_BYTES")
    segments_text = getattr(args, "max_segments", None) or env.get("TAY_MAX_SEGMENTS")
    with _named_by_flag():
        limits = ProtocolLimits(max_frame_bytes=args.max_frame_bytes,
                                max_connections=args.max_connections,
                                request_timeout_ms=args.request_timeout_ms,
                                result_bytes=args.executor_result_bytes).validate()
        engine = EngineConfig(
            queues=queues or {"default": default_credits},
            default_queue_concurrency=default_credits,
            client_slots=args.client_slots, client_bytes=args.client_bytes,
            max_state_bytes=state_bytes, max_reply_bytes=_reply_bytes(limits.max_frame_bytes),
            # what the engine checks and the history caps reserve for
            result_bytes=limits.result_bytes, error_bytes=limits.error_bytes,
            max_history_bytes=_positive_size("--max-history-bytes", history_text),
            max_segments=_optional_int("--max-segments", segments_text),
        )
    return ServeConfig(
        data_dir=data_dir, socket=resolve_socket_path(args.socket, environ=env),
        socket_mode=int(args.socket_mode, 8), init_if_missing=init,
        durability=args.durability, validated_filesystem=args.validated_filesystem,
        group_commit_max_events=args.group_commit_max_events,
        group_commit_interval_ms=interval, group_commit_linger=linger,
        engine=engine, limits=limits,
    )


# Config fields whose checks live in ProtocolLimits / EngineConfig, by the flag that sets them.
_FLAG_OF_FIELD = {
    "executor_max_frame_bytes": "--max-frame-bytes",
    "executor_max_connections": "--max-connections",
    "executor_result_bytes": "--executor-result-bytes",
    "request_timeout_ms": "--request-timeout-ms",
    "client_slots": "--client-slots",
    "client_bytes": "--client-bytes",
    "max_state_bytes": "--max-state-bytes",
}


@contextmanager
def _named_by_flag() -> Iterator[None]:
    """Re-raise a config field's refusal under the flag the user typed."""
    try:
        yield
    except ConfigurationError as error:
        flag = _FLAG_OF_FIELD.get(error.option)
        if flag is None:
            raise
        problem = error.message.split(": ", 1)[-1]
        raise ConfigurationError(flag, problem) from None


def fit_replies(config: "ServeConfig", http: Any) -> "ServeConfig":
    """A reply (a schedule page) must fit both the socket frame and the HTTP body limit."""
    if http is None:
        return config
    limit = _reply_bytes(min(config.limits.max_frame_bytes, http.limits.max_body_bytes))
    return replace(config, engine=replace(config.engine, max_reply_bytes=limit))


def _reply_bytes(transport_limit: int) -> int:
    # The engine needs room for at least one page entry; frames below 1 KiB are a test setup.
    return max(1024, transport_limit)


def _positive_size(option: str, text: str | None) -> int | None:
    if text is None or text == "":
        return None
    value = parse_size(option, text)
    if value < 1:
        raise ConfigurationError(option, f"must be positive, got {value}")
    return value


def _optional_int(option: str, text: str | None) -> int | None:
    if text is None or text == "":
        return None
    return parse_int(option, text, 1, 1 << 62)


def parse_queues(flags: list[str], env_value: str | None) -> dict[str, int]:
    """``--queue a=2`` (repeatable) or ``TAY_QUEUES=a=2,b=3``; flags win over the variable."""
    option, items = ("--queue", flags) if flags else ("TAY_QUEUES", (env_value or "").split(","))
    queues: dict[str, int] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, sep, credits = item.rpartition("=")
        if not sep or not name:
            raise ConfigurationError(option, f"{item!r} must be NAME=CREDITS")
        if name in queues:
            raise ConfigurationError(option, f"queue {name!r} given twice")
        queues[name] = parse_int(option, credits, 1, 65_536)
    return queues


def parse_size(option: str, text: str) -> int:
    match = _SIZE.match(str(text))
    if match is None:
        raise ConfigurationError(option, f"{text!r} must be an integer with an optional "
                                         "KB/MB/GB/KiB/MiB/GiB suffix")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(option: str, text: Any, low: int, high: int) -> int:
    """``text`` as a base-10 integer within ``low..high``, refused under ``option``'s name."""
    try:
        value = int(str(text), 10)
    except ValueError:
        raise ConfigurationError(option, f"{text!r} is not an integer") from None
    if not low <= value <= high:
        raise ConfigurationError(option, f"must be {low}..{high}, got {value}")
    return value


def _flag(option: str, text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(option, f"{text!r} must be true/TRUE/1 or false/FALSE/0")
