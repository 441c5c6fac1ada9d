"""Enqueue validation: task, args and options -> a job definition ready to insert.

Rules (protocol.md §2.3): exactly the keys of ``OPTION_KEYS``; ``priority`` and anything else
is refused. Seconds are multiplied by 1000 and positive halfway milliseconds round away from
zero (never Python's banker's rounding). Bools are never integers.

Decision: a JSON ``null`` option value means "absent" (the SDK passes ``None`` for unset
keyword options and its own checks treat ``None`` as absent); see docs/engine.md.

Every refusal is ``RequestRefused(code="invalid_enqueue")`` naming the option, except the
insert size limits, which are ``capacity`` refusals with the limit as ``reason``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import orjson

from tay._frozen import Fields
from tay.engine.config import EngineConfig
from tay.engine.validation.ids import (
    RandomSource, is_identifier, job_id_from_submission, parse_job_id, random_job_id,
)
from tay.engine.validation.values import Measure, UnsupportedValue, measure
from tay.failures import RequestRefused
from tay.storage.formats import value
from tay.storage.events.definition import LazyDefinition, build_definition, live_definition

_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
OPTION_KEYS = frozenset(
    {"id", "submission_id", "delay", "delay_ms", "run_at", "retries", "timeout",
     "timeout_ms", "backoff", "queue", "durability"}
)
TIME_MAX = 2**63 - 1
TIMEOUT_MAX_MS = 86_400_000
RETRIES_MAX = 65_534
DURABILITIES = ("persistent", "volatile")


class JobRequest(Fields):
    """A validated enqueue: the id and the definition (a ``LazyDefinition``: canonical bytes)."""

    job_id: bytes
    definition: LazyDefinition
    definition_size: int
    definition_nodes: int
    durability: str
    args_json: bytes | None = None  # the args as an execute frame carries them, if at hand

    def definition_bytes(self) -> bytes:
        """Canonical bytes (same-id comparison)."""
        return self.definition.canonical


def _invalid(message: str, option: str | None = None) -> RequestRefused:
    return RequestRefused(message, code="invalid_enqueue", option=option)


# The refusals both enqueue parses (the common decoded one and the general one) make, so
# each message is written once; built only on the refusing path.
def _bad_retries() -> RequestRefused:
    return _invalid(f"retries must be an integer in 0..{RETRIES_MAX}", "retries")


def _bad_backoff() -> RequestRefused:
    return _invalid("backoff must be 'exponential'", "backoff")


def _bad_durability() -> RequestRefused:
    return _invalid("durability must be 'persistent' or 'volatile'", "durability")


def _too_large(size: int, config: EngineConfig) -> RequestRefused:
    return RequestRefused(f"definition encodes to {size} bytes (limit {config.max_payload_bytes})",
                          code="capacity", reason="encoded_bytes")


def _is_int(obj: Any) -> bool:
    return type(obj) is int


def round_half_away(value: float) -> int:
    """Round a finite nonnegative float to the nearest integer, halves away from zero."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


def seconds_to_ms(obj: Any, option: str) -> int:
    """``delay``/``timeout`` seconds (int exact, float rounded) -> milliseconds."""
    if _is_int(obj):
        if obj < 0:
            raise _invalid(f"{option} must be >= 0", option)
        return obj * 1000
    if type(obj) is float:
        if not math.isfinite(obj) or obj < 0:
            raise _invalid(f"{option} must be a finite number >= 0", option)
        scaled = obj * 1000.0
        if not math.isfinite(scaled) or scaled > TIME_MAX:
            raise _invalid(f"{option} is too large", option)
        return round_half_away(scaled)
    raise _invalid(f"{option} must be a number of seconds", option)


def _ms_option(obj: Any, option: str, high: int) -> int:
    if not _is_int(obj) or not 0 <= obj <= high:
        raise _invalid(f"{option} must be an integer in 0..{high}", option)
    return obj


def _key(obj: Any, option: str, code: str = "invalid_enqueue") -> str:
    if type(obj) is not str or "\x00" in obj:
        raise RequestRefused(f"{option} must be a string without NUL", code=code, option=option)
    try:
        size = len(obj.encode("utf-8"))
    except UnicodeEncodeError:
        raise RequestRefused(f"{option} is not valid UTF-8", code=code, option=option) from None
    if not 1 <= size <= 255:
        raise RequestRefused(f"{option} must be 1..255 bytes", code=code, option=option)
    return obj


# names that passed ``_key`` -> the interned string: the jobs of one task and queue share
# two strings, and a name seen before is not checked again (bounded: many names start over)
_KEYS_SEEN: dict[str, str] = {}
_KEYS_SEEN_MAX = 4096


def _interned_key(obj: Any, option: str) -> str:
    """``sys.intern(_key(obj, option))``, remembered for a name seen before."""
    if type(obj) is str:
        seen = _KEYS_SEEN.get(obj)
        if seen is not None:
            return seen
    name = sys.intern(_key(obj, option))
    if len(_KEYS_SEEN) >= _KEYS_SEEN_MAX:
        _KEYS_SEEN.clear()
    _KEYS_SEEN[name] = name
    return name


def _present(options: dict[str, Any]) -> dict[str, Any]:
    """Drop null-valued options (null means absent) after refusing unknown keys."""
    if not isinstance(options, dict):
        raise _invalid("options must be an object", "options")
    if not options.keys() <= OPTION_KEYS:
        unknown = sorted(set(options) - OPTION_KEYS)
        raise _invalid(f"unsupported option {unknown[0]!r}", unknown[0])
    if None not in options.values():  # the common case: nothing to drop, nothing copied
        return options
    return {key: value for key, value in options.items() if value is not None}


_EXCLUSIVE = (("id", "submission_id"), ("delay", "delay_ms"), ("timeout", "timeout_ms"),
              ("delay", "run_at"), ("delay_ms", "run_at"))
_PAIRED = frozenset(name for pair in _EXCLUSIVE for name in pair)


def _exclusive(options: dict[str, Any], first: str, second: str) -> None:
    if first in options and second in options:
        raise _invalid(f"{first} and {second} cannot be combined", second)


def _scheduled_at(options: dict[str, Any], now_ms: int) -> int | None:
    if "run_at" in options:
        return _ms_option(options["run_at"], "run_at", TIME_MAX)
    if "delay" in options:
        delay = seconds_to_ms(options["delay"], "delay")
    elif "delay_ms" in options:
        delay = _ms_option(options["delay_ms"], "delay_ms", TIME_MAX)
    else:
        return None
    if now_ms + delay > TIME_MAX:
        raise _invalid("delay puts the job beyond the largest timestamp", "delay")
    return now_ms + delay


def _timeout_ms(options: dict[str, Any], default: int) -> int:
    if "timeout" in options:
        obj = options["timeout"]
        if _is_int(obj) and not 1 <= obj <= 86_400:
            raise _invalid("timeout must be 1..86400 seconds", "timeout")
        timeout = seconds_to_ms(obj, "timeout")
        if not 1 <= timeout <= TIMEOUT_MAX_MS:
            raise _invalid("timeout must round to 1..86400000 ms", "timeout")
        return timeout
    if "timeout_ms" in options:
        obj = options["timeout_ms"]
        if not _is_int(obj) or not 1 <= obj <= TIMEOUT_MAX_MS:
            raise _invalid("timeout_ms must be an integer in 1..86400000", "timeout_ms")
        return obj
    return default


def _job_id(options: dict[str, Any], rng: RandomSource) -> bytes:
    if "id" in options:
        return parse_job_id(options["id"], field="id", code="invalid_enqueue")
    if "submission_id" in options:
        if not is_identifier(options["submission_id"]):
            raise _invalid("submission_id must be 1..128 bytes without NUL", "submission_id")
        return job_id_from_submission(options["submission_id"])
    return random_job_id(rng)


def _check_args(args: Any, config: EngineConfig) -> Measure:
    """Refuse args that are not an object or exceed the insert limits; returns their measure."""
    if not isinstance(args, dict):
        raise _invalid("args must be a JSON object", "args")
    try:
        size = measure(args, "args")
    except UnsupportedValue as problem:
        raise RequestRefused(str(problem), code="invalid_enqueue", field=problem.where) from None
    return _within_limits(size, config)


def _decoded_args(args: Any, config: EngineConfig) -> tuple[Measure, bytes, bytes] | None:
    """``_check_args`` of args decoded from JSON text by ``orjson.loads`` (a
    ``DecodedEnqueue``), measured in the native transcoder on their way to canonical bytes:
    (measure, sorted compact JSON, canonical args bytes). Such args hold only dicts, lists,
    str, int within -2^63..2^64-1, finite floats, bools and None, so ``measure`` could refuse
    none of them and only the limits are left. None (not a dict, or nesting orjson cannot
    write, past 254 levels): the caller measures them as any args."""
    if type(args) is not dict:
        return None
    try:
        args_json = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None
    args_value, depth, nodes = value.encode_json_measured(args_json)
    return _within_limits(_new_tuple(Measure, (len(args_value), depth, nodes)), config), \
        args_json, args_value


def _within_limits(size: Measure, config: EngineConfig) -> Measure:
    if size.depth > config.max_depth:
        raise RequestRefused(f"args nest {size.depth} levels (limit {config.max_depth})",
                             code="capacity", reason="depth")
    if size.nodes > config.max_nodes:
        raise RequestRefused(f"args have {size.nodes} nodes (limit {config.max_nodes})",
                             code="capacity", reason="output_nodes")
    if size.encoded_bytes > config.max_args_bytes:
        raise RequestRefused(f"args encode to {size.encoded_bytes} bytes (limit {config.max_args_bytes})",
                             code="capacity", reason="encoded_bytes")
    return size


# the options an enqueue without an id, delay, run_at or timeout can carry
_PLAIN_OPTION_KEYS = OPTION_KEYS - _PAIRED


def parse_enqueue(
    task: Any, args: Any, options: Any, now_ms: int, config: EngineConfig, rng: RandomSource,
    decoded: bool = False,
) -> JobRequest:
    """Validate one enqueue and build its immutable definition (protocol.md §2.3-2.5).

    ``decoded``: the args came from ``orjson.loads`` (``DecodedEnqueue``) and are measured
    in the native transcoder instead of by a walk over them (the same refusals, in the same
    order: tests/engine/test_decoded_enqueue.py)."""
    if decoded and type(args) is dict and type(options) is dict \
            and options.keys() <= _PLAIN_OPTION_KEYS:
        request = _parse_plain_decoded(task, args, options, config, rng)
        if request is not None:
            return request
    return _parse_general(task, args, options, now_ms, config, rng, decoded)


def _parse_plain_decoded(task: Any, args: dict, options: dict, config: EngineConfig,
                         rng: RandomSource) -> JobRequest | None:
    """``_parse_general`` of the socket's common enqueue: decoded args (a dict) and options
    among ``_PLAIN_OPTION_KEYS`` only, so no exclusive pair, id, delay, run_at or timeout,
    and a null option reads as absent without the copy ``_present`` makes. The same checks
    in the same order with the same refusals, read inline (tests/engine/test_options_fast.py
    compares the two on generated enqueues); None: args orjson cannot write (past 254 levels
    of nesting), which the general path measures as any args."""
    try:
        args_json = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None
    task = (_KEYS_SEEN.get(task) if type(task) is str else None) \
        or _interned_key(task, "task")
    args_value, depth, nodes = value.encode_json_measured(args_json)
    if depth > config.max_depth or nodes > config.max_nodes \
            or len(args_value) > config.max_args_bytes:
        _within_limits(_new_tuple(Measure, (len(args_value), depth, nodes)), config)
    retries = options.get("retries")
    if retries is None:
        retries = 0
    elif type(retries) is not int or not 0 <= retries <= RETRIES_MAX:
        raise _bad_retries()
    backoff = options.get("backoff")
    if backoff is not None and backoff != "exponential":
        raise _bad_backoff()
    durability = options.get("durability")
    if durability is None:
        durability = "persistent"
    elif durability not in DURABILITIES:
        raise _bad_durability()
    queue = options.get("queue")
    if queue is None:
        queue = "default"
    queue = (_KEYS_SEEN.get(queue) if type(queue) is str else None) \
        or _interned_key(queue, "queue")
    live = live_definition(args_value, nodes, task, queue, retries + 1, None,
                           config.default_timeout_ms)
    size = len(live.canonical)
    if size > config.max_payload_bytes:
        raise _too_large(size, config)
    return _new_tuple(JobRequest, (random_job_id(rng), live, size,
                                   nodes + DEFINITION_FIXED_NODES, durability, args_json))


def parse_plain_enqueue(task: Any, args: Any, plain: tuple[int, str | None, str | None],
                        now_ms: int, config: EngineConfig, rng: RandomSource) -> JobRequest:
    """``parse_enqueue(task, args, plain_options(plain), now_ms, config, rng, True)`` of
    options the socket's frame scan read already (a ``PlainEnqueue``): ``plain`` is
    ``(retries, queue, durability)`` of options among queue, retries, backoff and
    durability whose values are each null or one the checks take as it is (retries
    0..65534, backoff "exponential", durability "persistent" or "volatile", queue a string
    of 1..255 bytes without NUL), None for a null or absent queue or durability. No option
    check is left, so this is ``_parse_plain_decoded`` without its option reads, inline (one
    frame fewer per job): the same request or refusal (tests/engine/test_options_fast.py).
    ``args`` may also be their JSON text as bytes, written exactly as ``orjson.dumps(args,
    option=OPT_SORT_KEYS)`` writes the decoded object (``tay._native.json_canonical``): it
    is then that sorted JSON itself, with no decode and no encode."""
    retries, queue, durability = plain
    if type(args) not in _PLAIN_ARGS or type(retries) is not int \
            or not 0 <= retries <= RETRIES_MAX or durability not in _PLAIN_DURABILITIES:
        if type(args) is bytes:
            args = orjson.loads(args)
        return parse_enqueue(task, args, plain_options(plain), now_ms, config, rng, True)
    if type(args) is bytes:  # the args' JSON text as orjson writes it (json_canonical)
        args_json = args
    else:
        try:
            args_json = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # past 254 levels: the general path measures them
            return parse_enqueue(task, args, plain_options(plain), now_ms, config, rng, True)
    task = (_KEYS_SEEN.get(task) if type(task) is str else None) \
        or _interned_key(task, "task")
    args_value, depth, nodes = value.encode_json_measured(args_json)
    if depth > config.max_depth or nodes > config.max_nodes \
            or len(args_value) > config.max_args_bytes:
        _within_limits(_new_tuple(Measure, (len(args_value), depth, nodes)), config)
    if queue is None:
        queue = "default"
    queue = (_KEYS_SEEN.get(queue) if type(queue) is str else None) \
        or _interned_key(queue, "queue")
    live = live_definition(args_value, nodes, task, queue, retries + 1, None,
                           config.default_timeout_ms)
    size = len(live.canonical)
    if size > config.max_payload_bytes:
        raise _too_large(size, config)
    return _new_tuple(JobRequest, (random_job_id(rng), live, size,
                                   nodes + DEFINITION_FIXED_NODES,
                                   "persistent" if durability is None else durability,
                                   args_json))


_PLAIN_DURABILITIES = (None, *DURABILITIES)
_PLAIN_ARGS = (dict, bytes)  # decoded args, or their text as orjson writes it


def plain_options(plain: tuple[int, str | None, str | None]) -> dict[str, Any]:
    """The options object a ``PlainEnqueue``'s ``(retries, queue, durability)`` stands for:
    what ``parse_enqueue`` reads as the same request."""
    retries, queue, durability = plain
    options: dict[str, Any] = {"retries": retries}
    if queue is not None:
        options["queue"] = queue
    if durability is not None:
        options["durability"] = durability
    return options


def _parse_general(task: Any, args: Any, options: Any, now_ms: int, config: EngineConfig,
                   rng: RandomSource, decoded: bool) -> JobRequest:
    """``parse_enqueue`` of any enqueue."""
    present = _present({} if options is None else options)
    # the common case: no id, delay, run_at or timeout (every one of them is in _PAIRED),
    # so the calls that read those options are skipped (they would find nothing)
    plain = present.keys().isdisjoint(_PAIRED)
    if not plain:
        for first, second in _EXCLUSIVE:
            _exclusive(present, first, second)
    # interned: every job of a task and queue holds the same two strings, not its own
    # copies decoded from its request (~110 bytes a retained job); a name seen before
    # without the call (_interned_key's own first step)
    task = (_KEYS_SEEN.get(task) if type(task) is str else None) \
        or _interned_key(task, "task")
    transcoded = _decoded_args(args, config) if decoded else None
    if transcoded is None:
        args_size = _check_args(args, config)
    else:
        args_size = transcoded[0]
    retries = present.get("retries", 0)
    if not _is_int(retries) or not 0 <= retries <= RETRIES_MAX:
        raise _bad_retries()
    if present.get("backoff", "exponential") != "exponential":
        raise _bad_backoff()
    durability = present.get("durability", "persistent")
    if durability not in DURABILITIES:
        raise _bad_durability()
    queue = present.get("queue", "default")
    queue = (_KEYS_SEEN.get(queue) if type(queue) is str else None) \
        or _interned_key(queue, "queue")
    if plain:
        scheduled_at = None
        timeout_ms = config.default_timeout_ms
    else:
        scheduled_at = _scheduled_at(present, now_ms)
        timeout_ms = _timeout_ms(present, config.default_timeout_ms)
    if transcoded is None:
        live, args_json = _live_definition(task, args, queue, retries + 1, scheduled_at,
                                           timeout_ms, args_size)
    else:
        args_json = transcoded[1]
        live = live_definition(transcoded[2], args_size.nodes, task, queue, retries + 1,
                               scheduled_at, timeout_ms)
    size = len(live.canonical)
    if size > config.max_payload_bytes:
        raise _too_large(size, config)
    nodes = args_size.nodes + DEFINITION_FIXED_NODES
    job_id = random_job_id(rng) if plain else _job_id(present, rng)
    return _new_tuple(JobRequest, (job_id, live, size, nodes, durability, args_json))


def _live_definition(task: str, args: dict, queue: str, max_attempts: int,
                     scheduled_at: int | None, timeout_ms: int,
                     args_size: Measure) -> tuple[LazyDefinition, bytes | None]:
    """The one encoding of this definition: the job keeps these bytes, the event splices them.
    Also returns the args' sorted compact JSON when it was written (None otherwise): the
    bytes an ``execute`` frame carries, which the transcoder would write back from them.

    Args that passed ``measure`` hold only exact JSON types, so orjson writes them exactly
    and the native transcoder turns that text into canonical bytes (~4x faster than the
    object encoder). orjson stops at 254 levels of nesting: deeper args (allowed only with
    a raised ``max_depth``) take the object encoder.
    """
    try:
        args_json = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        definition = build_definition(worker_key=task, queue_key=queue, args=args,
                                      max_attempts=max_attempts, scheduled_at=scheduled_at,
                                      timeout_ms=timeout_ms)
        return LazyDefinition.from_live(definition, value.encode(definition),
                                        args_size.encoded_bytes, args_size.nodes), None
    return LazyDefinition.from_args_json(args_json, args_size.nodes, worker_key=task,
                                         queue_key=queue, max_attempts=max_attempts,
                                         scheduled_at=scheduled_at,
                                         timeout_ms=timeout_ms), args_json


# root map (1) + 8 keys + 7 non-args values + retry_policy's 4 keys and 4 values
DEFINITION_FIXED_NODES = 1 + 8 + 7 + 8
