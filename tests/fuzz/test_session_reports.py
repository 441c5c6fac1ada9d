"""The session's per-job shortcut: ``started``/``succeeded``/``failed``/``enqueue`` after hello
(reports and enqueues of the common shape read by the frame scan itself) are parsed
straight into whatever the ``reports`` and ``enqueue`` constructors build (the server's
engine commands), and must give exactly what the general dispatch gives: the same typed
request (or the command it maps to, with an enqueue's size), the same refusal frames, the
same fatal close, the same pending count, for well-formed, hostile, mutated and mis-framed
input split into arbitrary reads."""

from __future__ import annotations

import random
from functools import partial

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay._native import split_frames_marked
from tay.engine import EngineConfig
from tay.engine import commands as engine_commands
from tay.engine.validation.options import parse_enqueue, parse_plain_enqueue
from tay.failures import RequestRefused
from tay.protocol.limits import ProtocolLimits
from tay.protocol.session import ProtocolSession
from tay.server.uds.connection import Connection, to_engine_command

from . import grammar
from .conftest import COUNTS, examples

LIMITS = ProtocolLimits(max_frame_bytes=65_536, result_bytes=64, error_bytes=96)
CONN = "conn"
REPORT_TYPES = ["started", "succeeded", "failed"]
REPORT_CLASSES = {"Started", "Succeeded", "Failed"}  # the wire requests of reports


class _Unmarked:
    """A session's frame decoder with every report mark (2, 3) taken back to clean (1): the
    reports the decoder reads itself (tay._native.split_frames_marked) are decoded again."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder

    @property
    def buffered(self) -> int:
        return self._decoder.buffered

    @property
    def fatal(self):
        return self._decoder.fatal

    def feed(self, data: bytes) -> list:
        return [(payload, min(mark, 1), None) for payload, mark, _ in self._decoder.feed(data)]


def general_route() -> ProtocolSession:
    """A session whose reports take the general dispatch (the route before the shortcuts)."""
    session = ProtocolSession(LIMITS)
    session._shortcuts = {}  # every message through _dispatch and its parsers
    session.decoder = _Unmarked(session.decoder)  # and through the JSON decoder
    return session


def enqueue_command(request_id, task, args, options, size):
    """The server's enqueue constructor (Connection._enqueue_command), for CONN."""
    return Connection._enqueue_command(CONN, request_id, task, args, options, size)


def plain_enqueue_command(request_id, task, args, plain, size):
    """The server's constructor of an enqueue whose options the scan read, for CONN."""
    return Connection._plain_enqueue_command(CONN, request_id, task, args, plain, size)


def parsed(command) -> tuple:
    """What the engine's parse makes of an enqueue command (the id drawn from one seeded
    rng): the request's fields, or the refusal."""
    conn, request_id, task, args, options = command
    config, rng = EngineConfig(), random.Random(7)
    try:
        if type(command) is engine_commands.PlainEnqueue:
            request = parse_plain_enqueue(task, args, options, 0, config, rng)
        else:
            request = parse_enqueue(task, args, options, 0, config, rng, True)
    except RequestRefused as refused:
        return ("refused", refused.code, refused.message, refused.details)
    return ("ok", request.job_id, request.definition.canonical, request.definition_size,
            request.definition_nodes, request.durability, request.args_json)


@st.composite
def report_heavy_messages(draw: st.DrawFn) -> dict:
    message = draw(grammar.messages())
    how = draw(st.integers(0, 4))
    if how == 0:
        return message
    if how == 4:  # an enqueue as producers write it: the decoder reads its top level itself
        plain = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E,
                                      blacklist_characters='"\\'), min_size=1, max_size=8)
        enqueue = {"version": 1, "type": "enqueue", "request_id": draw(plain),
                   "task": draw(plain | grammar.keys),
                   "args": draw(st.dictionaries(st.text(max_size=4), grammar.json_values,
                                                max_size=4))}
        how_options = draw(st.integers(0, 3))
        if how_options == 1:
            enqueue["options"] = draw(grammar.options)
        elif how_options > 1:  # as producers write them: the scan reads them too, mostly
            enqueue["options"] = draw(st.fixed_dictionaries({}, optional={
                "queue": st.none() | plain | grammar.keys,
                "retries": st.none() | st.integers(0, 3) | st.sampled_from(
                    [65_534, 65_535, -1, 1.0, True]),
                "backoff": st.sampled_from([None, "exponential", "linear"]),
                "durability": st.sampled_from([None, "persistent", "volatile", "x"])}))
        if not draw(st.integers(0, 5)):  # another key: a plain one, "v", or any value
            enqueue[draw(st.sampled_from(["job_id", "v", "x"]))] = draw(
                plain | grammar.json_values)
        return enqueue
    if how == 3:  # a report as workers write it: the decoder reads it itself (or nearly)
        plain = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E,
                                      blacklist_characters='"\\'), min_size=1, max_size=8)
        report = {"version": 1, "type": draw(st.sampled_from(["started", "succeeded"])),
                  "request_id": draw(plain | grammar.identifiers),
                  "reservation_id": draw(plain), "execution_id": draw(plain)}
        if draw(st.booleans()):
            report["result"] = None
        if draw(st.booleans()):  # tay-client sends the job's id too
            report["job_id"] = draw(plain)
        return report
    kind = draw(st.sampled_from(REPORT_TYPES))
    if how == 1:  # a report with its fields drawn as the grammar does (often some missing)
        body = dict(draw(grammar.BODIES[kind]))
    else:  # a complete report, its values still drawn from the edge cases
        body = {"reservation_id": draw(grammar.identifiers),
                "execution_id": draw(grammar.identifiers)}
        if kind == "succeeded":
            body["result"] = draw(grammar.json_values)
        elif kind == "failed":
            body["error"] = draw(grammar.some_of({"type": grammar.identifiers,
                                                  "message": grammar.scalars,
                                                  "traceback": grammar.scalars}))
    envelope = {key: message[key] for key in ("version", "v", "request_id") if key in message}
    return {**envelope, **body, "type": kind}


def commands_makers() -> tuple:
    """The engine commands' constructors for CONN, as the session's report makers."""
    return tuple(partial(report, CONN) for report in (
        engine_commands.Started, engine_commands.Succeeded, engine_commands.Failed))


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_report_shortcut_gives_what_the_general_dispatch_gives(data) -> None:
    reference, default = general_route(), ProtocolSession(LIMITS)
    commands = ProtocolSession(LIMITS, commands_makers(), enqueue_command)
    # and the server's way: reports read already made as the command tuples at once
    tuples = ProtocolSession(LIMITS, commands_makers(), enqueue_command, report_tuples=(
        engine_commands.Started, engine_commands.Succeeded, (CONN,)))
    # and the options the scan read handed on as the engine's PlainEnqueue
    plain = ProtocolSession(LIMITS, commands_makers(), enqueue_command, report_tuples=(
        engine_commands.Started, engine_commands.Succeeded, (CONN,)),
        plain_enqueue=plain_enqueue_command)
    payloads = []
    if data.draw(st.integers(0, 4)):  # most connections say hello first
        mode = data.draw(st.sampled_from(["worker", "client", "embedded"]))
        payloads.append(grammar.encode({"version": 1, "type": "hello", "request_id": "h",
                                        "mode": mode, "runtime_id": "fuzz",
                                        "max_concurrency": 0 if mode == "client" else 2}))
    for _ in range(data.draw(st.integers(1, 12))):
        payloads.append(data.draw(grammar.mutated(grammar.encode(
            data.draw(report_heavy_messages())))))
    answered = 0  # every whole frame gives one output, in order: payloads[answered] next
    stream = grammar.frames(payloads, data.draw)
    marks = [mark for _, _, mark, _ in split_frames_marked(
        stream, LIMITS.max_frame_bytes, LIMITS.max_depth, LIMITS.max_nodes,
        LIMITS.max_key_bytes)[0]]
    COUNTS["read_reports"] += sum(mark in (2, 3) for mark in marks)
    COUNTS["read_enqueues"] += marks.count(4)
    for piece in data.draw(grammar.chunked(stream)):
        expected = reference.receive(piece)
        for want in expected.outputs:
            if type(want).__name__ == "Enqueue":  # its size is its frame's payload length
                assert want.size == len(payloads[answered])
            answered += 1
        for session in (default, commands, tuples, plain):
            got = session.receive(piece)
            assert got.close_frame == expected.close_frame
            assert len(got.outputs) == len(expected.outputs)
            for want, have in zip(expected.outputs, got.outputs):
                if session is not default and type(want).__name__ in REPORT_CLASSES:
                    COUNTS["shortcut_reports"] += 1
                    command = to_engine_command(CONN, want)
                    assert type(have) is type(command) and have == command
                elif session is not default and type(want).__name__ == "Enqueue":
                    COUNTS["shortcut_enqueues"] += 1
                    command = to_engine_command(CONN, want)
                    if type(have[0]) is engine_commands.PlainEnqueue:
                        # the same request fields; its options the engine reads the same
                        COUNTS["plain_enqueues"] += 1
                        assert session is plain and have[1] == want.size
                        if type(have[0].args) is bytes:
                            # the args' text as it came: orjson's writing of the args
                            COUNTS["plain_args_texts"] += 1
                            assert have[0][:3] == command[:3]
                            assert have[0].args == orjson.dumps(
                                command.args, option=orjson.OPT_SORT_KEYS)
                        else:
                            assert have[0][:4] == command[:4]
                        assert parsed(have[0]) == parsed(command)
                    else:
                        assert have == (command, want.size)
                else:
                    assert type(have) is type(want) and have == want
            assert (session.pending, session.hello, session.failed) == (
                reference.pending, reference.hello, reference.failed)

