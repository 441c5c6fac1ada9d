"""``tay serve``: flags and environment variables -> ``ServeConfig`` -> the server.

Every bad value exits with status 2 and a message naming the option (flag or variable).
Environment variables apply when the flag is absent; flags win.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tay._frozen import replace
from tay.failures import ConfigurationError, StorageFailure

from .flag_values import HTTP_TLS_OPTIONS, http_port_text, parse_int, parse_size

if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

    from .serve_config import ServeConfig

# The server stack (engine, storage, uvloop) is imported only when `serve` runs, so other
# `tay` commands stay light.

_TRUE, _FALSE = ("true", "TRUE", "1"), ("false", "FALSE", "0")


def register(groups: Any) -> None:
    parser = groups.add_parser(
        "serve", help="run the engine with its Unix-socket and HTTP listeners",
        description="Run the engine. Every option can also be set by the environment "
                    "variable named in its help; a flag wins over its variable.")
    declare(parser)
    parser.set_defaults(handler=run)


def parse_exact(argv: list[str]) -> SimpleNamespace | None:
    """``tay serve``'s arguments read without argparse (``tay.cli_fast``), or None when
    argparse must read them: the namespace its parser would give, ``group`` and
    ``handler`` included."""
    from tay.cli_fast import ExactOptions

    options = ExactOptions()
    declare(options)
    args = options.parse(argv)
    if args is not None:
        args.group, args.handler = "serve", run
    return args


def declare(parser: Any) -> None:
    """serve's options, on its argparse parser or on a ``tay.cli_fast.ExactOptions``."""
    add = parser.add_argument
    add("--data-dir", help="store directory; required (TAY_DATA_DIR)")
    add("--socket", metavar="PATH|off",
        help="socket path or off; default: discovery, off when HTTP is on (TAY_SOCKET_PATH)")
    add("--socket-mode", choices=("0600", "0660"), help="socket file mode; default 0600 "
                                                        "(TAY_SOCKET_MODE)")
    add("--init-if-missing", action="store_true", default=None,
        help="create an empty store if none exists; default false (TAY_INITIALIZE_IF_MISSING)")
    add("--durability", choices=("sync", "write"),
        help="sync: fsync before every acknowledgement; write: development only; default sync "
             "(TAY_DURABILITY)")
    add("--validated-filesystem", action="store_true", default=None,
        help="attest that the store's filesystem honours fsync; required for sync; default "
             "false (TAY_VALIDATED_FILESYSTEM)")
    add("--group-commit-max-events", help="events per fsync batch, 1..1000000; default 1 "
                                          "(TAY_GROUP_COMMIT_MAX_EVENTS)")
    add("--group-commit-interval-ms",
        help="0..1000, default 0: the longest a group-commit batch waits to fill; batches are "
             "written as soon as no input is ready (TAY_GROUP_COMMIT_INTERVAL_MS)")
    add("--group-commit-linger", action="store_true", default=None,
        help="wait the whole interval for a batch to fill instead of writing once no input "
             "is ready: fewer fsyncs, more latency; needs max events > 1 and interval > 0 "
             "(default off; TAY_GROUP_COMMIT_LINGER)")
    add("--group-commit-gather-us",
        help="0..100000, default 1000: group commit under load (the previous batch carried "
             "several submissions and was durable less than one fdatasync ago): the next "
             "batch waits at most this long, and at most one recent fdatasync, for as many "
             "submissions as that batch had; 0: never waits "
             "(TAY_GROUP_COMMIT_GATHER_US)")
    add("--journal-writer", choices=("auto", "c", "python"), default=None,
        help="the journal writer thread: c (native, never takes the GIL), python (the twin), "
             "auto: c when the native module is built (default auto; TAY_JOURNAL_WRITER)")
    add("--journal-writer-rt-priority", metavar="N",
        help="run the C writer thread SCHED_FIFO at priority N (1..99), so it wakes at once "
             "after each fdatasync on a busy machine; needs CAP_SYS_NICE or RLIMIT_RTPRIO >= N "
             "(default 0: normal scheduling; TAY_JOURNAL_WRITER_RT_PRIORITY). It can cost more "
             "than it gives (smaller batches: docs/journal.md); measure on your machine")
    add("--queue", action="append", default=[], metavar="NAME=CREDITS",
        help="queue concurrency, repeatable; default default=10 (TAY_QUEUES=alpha=2,beta=2)")
    add("--default-queue-concurrency", help="credits of queues not listed, 1..65536; default 10 "
                                            "(TAY_DEFAULT_QUEUE_CONCURRENCY)")
    add_budget_arguments(add)
    add("--client-slots", help="enqueues in flight at once, on both transports; each holds a "
        "permit until its reply is sent, beyond it: capacity/client_slots; default 64 "
        "(TAY_CLIENT_SLOTS)")
    add("--client-bytes", help="request bytes all permits may hold; one enqueue may be at most "
        "client-bytes / client-slots, beyond it: capacity/client_bytes; default 67108864 "
        "(TAY_CLIENT_BYTES)")
    add("--max-frame-bytes", help="largest socket frame, up to 16 MiB; default 1048576 "
                                  "(TAY_MAX_FRAME_BYTES)")
    add("--max-connections", help="socket connections plus HTTP worker sessions; default 128 "
                                  "(TAY_MAX_CONNECTIONS)")
    add("--executor-result-bytes", help="largest encoded result an executor may report; "
                                        "default 65536 (TAY_EXECUTOR_RESULT_BYTES)")
    add("--request-timeout-ms", help="per pending socket request, 1..3600000 (answers "
                                     "request_timeout on expiry); default 30000 "
                                     "(TAY_REQUEST_TIMEOUT_MS)")
    add("--hello-timeout-ms", help="a socket connection must say hello within this, else "
        "hello_timeout and close, 1..3600000; default 10000 (TAY_HELLO_TIMEOUT_MS)")
    add("--frame-timeout-ms", help="a socket frame must arrive whole within this of its first "
        "byte, else frame_timeout and close, 1..3600000; default 30000 "
        "(TAY_FRAME_TIMEOUT_MS)")
    add("--drain-timeout", help="seconds SIGTERM waits for running executions before stopping; "
                                "0 stops at once; default 30 (TAY_DRAIN_TIMEOUT)")
    add("--loop-stall-ms", help="an event-loop beat this late is a stall: counted in "
        "tay_event_loop_stalls_total and logged with where the loop was, 0..3600000, 0 off; "
        "default 500 (TAY_LOOP_STALL_MS)")
    add("--metrics-port", help="serve /metrics, /healthz, /readyz on this loopback port too; "
                               "default off (TAY_METRICS_PORT)")
    add("--log-level", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="default INFO (TAY_LOG_LEVEL)")
    add("--log-format", choices=("text", "json"), help="default text (TAY_LOG_FORMAT)")
    from .compaction.config import add_compaction_arguments

    add_compaction_arguments(parser)
    add_http_arguments(parser)


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    """The HTTP listener's flags (read by ``tay.server.http.config``, which a start without
    an HTTP port never imports)."""
    add = parser.add_argument
    add("--http-port", help="enable the HTTP/JSON API on this TCP port (0: any free port); "
                            "default off (TAY_HTTP_PORT)")
    add("--http-ip", help="bind address, default 127.0.0.1 (TAY_HTTP_IP)")
    for _, flag, variable in HTTP_TLS_OPTIONS:
        add(flag, help=f"absolute PEM path; mTLS needs all three; default none ({variable})")
    add("--http-max-body-bytes", help="request/response body limit, default 1048576 "
                                      "(TAY_HTTP_MAX_BODY_BYTES)")
    add("--dashboard", choices=("on", "off"),
        help="serve the web dashboard under /ui/ on the HTTP listener, default on "
             "(TAY_DASHBOARD)")


def setting(args: argparse.Namespace, name: str, env: Mapping[str, str], variable: str,
            default: Any) -> Any:
    """The flag's value, else the variable's, else ``default`` (flags win)."""
    value = getattr(args, name, None)
    if value is not None and value != []:
        return value
    return env.get(variable, default)


def add_budget_arguments(add: Any) -> None:
    """The budgets recovery checks a store against. ``tay storage inspect`` takes the same
    flags and variables, so it refuses exactly what ``tay serve`` would refuse."""
    add("--max-state-bytes", help="retained-state budget, KB/MB/GB/KiB/MiB/GiB allowed; default "
                                  "268435456 (TAY_MAX_STATE_BYTES)")
    add("--max-history-bytes", help="cap on all segment bytes, size suffixes allowed; "
                                     "default unlimited (TAY_MAX_HISTORY_BYTES)")
    add("--max-segments", help="cap on segment files; default unlimited (TAY_MAX_SEGMENTS)")


def budget_settings(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """``EngineConfig`` fields of ``add_budget_arguments`` (flag, else variable, else default)."""
    history_text = getattr(args, "max_history_bytes", None) or env.get("TAY_MAX_HISTORY_BYTES")
    segments_text = getattr(args, "max_segments", None) or env.get("TAY_MAX_SEGMENTS")
    return {
        "max_state_bytes": parse_size("--max-state-bytes", setting(
            args, "max_state_bytes", env, "TAY_MAX_STATE_BYTES", "268435456")),
        "max_history_bytes": _positive_size("--max-history-bytes", history_text),
        "max_segments": _optional_int("--max-segments", segments_text),
    }


def budget_engine_config(args: argparse.Namespace, env: Mapping[str, str]) -> Any:
    """The ``EngineConfig`` ``tay storage inspect`` recovers with: serve's budgets, the
    defaults for everything that does not decide what recovery accepts."""
    from tay.engine.config import EngineConfig

    with _named_by_flag():
        return EngineConfig(**budget_settings(args, env))


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    from .logs import configure_logging

    env = os.environ if environ is None else environ
    level = str(setting(args, "log_level", env, "TAY_LOG_LEVEL", "INFO")).upper()
    log_format = setting(args, "log_format", env, "TAY_LOG_FORMAT", "text")
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        print(f"tay serve: TAY_LOG_LEVEL: {level!r} is not a log level", file=sys.stderr)
        return 2
    if log_format not in ("text", "json"):
        print(f"tay serve: TAY_LOG_FORMAT: {log_format!r} must be text or json", file=sys.stderr)
        return 2
    configure_logging(level, log_format)
    try:
        if http_port_text(args, env):  # HTTP off: tay.server.http.config is not imported
            from .http.config import apply_http

            config, http = apply_http(args, env, build_config(args, env))
        else:
            config, http = build_config(args, env), None
        config = fit_replies(config, http)
    except ConfigurationError as error:
        print(f"tay serve: {error.message}", file=sys.stderr)
        return 2
    try:
        from .app import run_serve  # HTTP off: httptools and ssl are not imported at all

        return run_serve(config, http, dashboard if http is not None and http.dashboard
                         else None)
    except ConfigurationError as error:
        print(f"tay serve: {error.message}", file=sys.stderr)
        return 2
    except StorageFailure as failure:
        from .preflight import explain

        print(f"tay serve: {explain(failure, config.data_dir)}", file=sys.stderr)
        return 1


def dashboard(admin_call: Any) -> Any:
    """The web dashboard the HTTP listener serves under /ui/ (``--dashboard on``): the UI
    layer above the server, which the command line hands in and imports only then."""
    from tay.dashboard import Dashboard

    return Dashboard(admin_call)


def build_config(args: argparse.Namespace, env: Mapping[str, str]) -> "ServeConfig":
    from tay.engine.config import EngineConfig
    from tay.protocol.limits import ProtocolLimits
    from tay.storage.journal.commit import GATHER_US

    from .serve_config import ServeConfig
    from .uds.socket_path import resolve_socket_path

    data_dir = args.data_dir or env.get("TAY_DATA_DIR")
    if not data_dir:
        raise ConfigurationError("--data-dir", "required (or set TAY_DATA_DIR)")
    data_dir = os.path.abspath(data_dir)
    init = args.init_if_missing or _flag("TAY_INITIALIZE_IF_MISSING",
                                         env.get("TAY_INITIALIZE_IF_MISSING", "false"))
    validated = args.validated_filesystem or _flag(
        "TAY_VALIDATED_FILESYSTEM", env.get("TAY_VALIDATED_FILESYSTEM", "false"))
    durability = _choice("--durability", setting(args, "durability", env, "TAY_DURABILITY",
                                                 "sync"), ("sync", "write"))
    socket_mode = _choice("--socket-mode", setting(args, "socket_mode", env, "TAY_SOCKET_MODE",
                                                   "0600"), ("0600", "0660"))
    interval = parse_int("--group-commit-interval-ms", setting(
        args, "group_commit_interval_ms", env, "TAY_GROUP_COMMIT_INTERVAL_MS", "0"), 0, 1_000)
    max_events = parse_int("--group-commit-max-events", setting(
        args, "group_commit_max_events", env, "TAY_GROUP_COMMIT_MAX_EVENTS", "1"), 1, 1_000_000)
    linger = bool(getattr(args, "group_commit_linger", None) or _flag(
        "TAY_GROUP_COMMIT_LINGER", env.get("TAY_GROUP_COMMIT_LINGER", "false")))
    if linger and (max_events < 2 or interval < 1):
        raise ConfigurationError("--group-commit-linger",
                                 "needs --group-commit-max-events > 1 and "
                                 "--group-commit-interval-ms > 0")
    gather = parse_int("--group-commit-gather-us", setting(
        args, "group_commit_gather_us", env, "TAY_GROUP_COMMIT_GATHER_US", str(GATHER_US)),
        0, 100_000)
    writer = setting(args, "journal_writer", env, "TAY_JOURNAL_WRITER", "auto")
    if writer not in ("auto", "c", "python"):
        raise ConfigurationError("--journal-writer", f"{writer!r} is not auto, c or python")
    if writer == "c":
        from tay.storage.journal.native_commit import native_writer_available

        if not native_writer_available():
            raise ConfigurationError("--journal-writer", "c needs the native module "
                                     "(build it with `make native`)")
    rt_priority = parse_int("--journal-writer-rt-priority", setting(
        args, "journal_writer_rt_priority", env, "TAY_JOURNAL_WRITER_RT_PRIORITY", "0"), 0, 99)
    if rt_priority and writer == "python":
        raise ConfigurationError("--journal-writer-rt-priority",
                                 "needs the C journal writer (--journal-writer c or auto); "
                                 "the Python writer takes the GIL after every batch")
    if rt_priority and writer == "auto":
        from tay.storage.journal.native_commit import native_writer_available

        if not native_writer_available():
            raise ConfigurationError("--journal-writer-rt-priority", "needs the C journal "
                                     "writer: build the native module with `make native`")
        writer = "c"  # what auto would choose; the priority must not fall back silently
    queues = parse_queues(args.queue, env.get("TAY_QUEUES"))
    default_credits = parse_int("--default-queue-concurrency", setting(
        args, "default_queue_concurrency", env, "TAY_DEFAULT_QUEUE_CONCURRENCY", "10"), 1, 65_536)
    budgets = budget_settings(args, env)
    numbers = {flag: parse_int(flag, setting(args, name, env, variable, default), 1, 1 << 62)
               for flag, name, variable, default in _NUMBERS}
    drain = parse_int("--drain-timeout", setting(args, "drain_timeout", env, "TAY_DRAIN_TIMEOUT",
                                                 "30"), 0, 86_400)
    from .loop_watch import STALL_MS

    loop_stall_ms = parse_int("--loop-stall-ms", setting(args, "loop_stall_ms", env,
                                                         "TAY_LOOP_STALL_MS", str(STALL_MS)),
                              0, 3_600_000)
    metrics_text = setting(args, "metrics_port", env, "TAY_METRICS_PORT", None)
    metrics_port = None if metrics_text in (None, "") else parse_int("--metrics-port",
                                                                     metrics_text, 0, 65_535)
    with _named_by_flag():
        limits = ProtocolLimits(max_frame_bytes=numbers["--max-frame-bytes"],
                                max_connections=numbers["--max-connections"],
                                request_timeout_ms=numbers["--request-timeout-ms"],
                                hello_timeout_ms=numbers["--hello-timeout-ms"],
                                frame_timeout_ms=numbers["--frame-timeout-ms"],
                                result_bytes=numbers["--executor-result-bytes"]).validate()
        engine = EngineConfig(
            queues=queues or {"default": default_credits},
            default_queue_concurrency=default_credits,
            client_slots=numbers["--client-slots"], client_bytes=numbers["--client-bytes"],
            max_reply_bytes=_reply_bytes(limits.max_frame_bytes),
            # what the engine checks and the history caps reserve for
            result_bytes=limits.result_bytes, error_bytes=limits.error_bytes,
            **budgets,
        )
    from .compaction.config import compaction_config

    retention, compaction = compaction_config(args, env)
    return ServeConfig(
        data_dir=data_dir, socket=resolve_socket_path(args.socket, environ=env),
        socket_mode=int(socket_mode, 8), init_if_missing=init,
        durability=durability, validated_filesystem=validated,
        group_commit_max_events=max_events,
        group_commit_interval_ms=interval, group_commit_linger=linger,
        group_commit_gather_us=gather, journal_writer=writer,
        journal_writer_rt_priority=rt_priority,
        engine=engine, limits=limits, terminal_retention=retention, compaction=compaction,
        drain_timeout_s=float(drain), metrics_port=metrics_port, loop_stall_ms=loop_stall_ms,
    )


# integer options: (flag, attribute, variable, default)
_NUMBERS = (
    ("--client-slots", "client_slots", "TAY_CLIENT_SLOTS", "64"),
    ("--client-bytes", "client_bytes", "TAY_CLIENT_BYTES", str(64 * 1024 * 1024)),
    ("--max-frame-bytes", "max_frame_bytes", "TAY_MAX_FRAME_BYTES", "1048576"),
    ("--max-connections", "max_connections", "TAY_MAX_CONNECTIONS", "128"),
    ("--executor-result-bytes", "executor_result_bytes", "TAY_EXECUTOR_RESULT_BYTES", "65536"),
    ("--request-timeout-ms", "request_timeout_ms", "TAY_REQUEST_TIMEOUT_MS", "30000"),
    ("--hello-timeout-ms", "hello_timeout_ms", "TAY_HELLO_TIMEOUT_MS", "10000"),
    ("--frame-timeout-ms", "frame_timeout_ms", "TAY_FRAME_TIMEOUT_MS", "30000"),
)


def _choice(option: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigurationError(option, f"{value!r} must be one of {', '.join(choices)}")
    return value


# Config fields whose checks live in ProtocolLimits / EngineConfig, by the flag that sets them.
_FLAG_OF_FIELD = {
    "executor_max_frame_bytes": "--max-frame-bytes",
    "executor_max_connections": "--max-connections",
    "executor_result_bytes": "--executor-result-bytes",
    "request_timeout_ms": "--request-timeout-ms",
    "hello_timeout_ms": "--hello-timeout-ms",
    "frame_timeout_ms": "--frame-timeout-ms",
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


def _flag(option: str, text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(option, f"{text!r} must be true/TRUE/1 or false/FALSE/0")
