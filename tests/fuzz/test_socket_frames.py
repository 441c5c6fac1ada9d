"""Fuzzing the Unix-socket path: bytes -> ``ProtocolSession`` -> engine command -> engine ->
reply frames and journal records, as ``tay.server.uds.connection`` runs it, minus asyncio.

Each example is one connection: usually a worker hello and a task registration first (so
jobs are dispatched to it and reports can name real executions), then messages from
``grammar`` (framed, sometimes mutated or mis-framed, split into reads), with the clock
moving and the engine ticking in between. Nothing may raise; every reply must be a JSON
frame; every event the engine emits must encode and decode as a journal record.

``make test`` runs a short pass; ``make fuzz`` a long one (``TAY_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay.engine import Engine, EngineConfig
from tay.engine.effects import Refuse, Reply
from tay.protocol import requests as wire
from tay.protocol.admin_api import AdminRequest
from tay.protocol.limits import ProtocolLimits
from tay.protocol.replies import error_frame, message_frame
from tay.protocol.session import ProtocolSession
from tay.server.uds.connection import UnsupportedRequest, to_engine_command
from tay.storage.events import decode_event, journal_records

from . import grammar
from .conftest import COUNTS, examples

T0 = 1_767_225_600_000
LIMITS = ProtocolLimits(max_frame_bytes=65_536)


def frame_message(data: bytes) -> dict:
    size = int.from_bytes(data[:4], "big")
    assert size == len(data) - 4 and size > 0
    message = orjson.loads(data[4:])
    assert type(message) is dict and message["version"] == 1 and type(message["type"]) is str
    return message


class Peer:
    """One fuzzed connection and the engine it talks to."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = ProtocolSession(LIMITS)
        self.now, self.mono = T0, 10_000
        self.executions: list[tuple[str, str]] = []
        self.jobs: list[str] = []

    def feed(self, data: bytes) -> None:
        received = self.session.receive(data)
        for output in received.outputs:
            if isinstance(output, bytes):
                frame_message(output)
            elif isinstance(output, AdminRequest):
                COUNTS["admin_requests"] += 1  # answered by the admin service, not fuzzed here
            else:
                self.run(output)
        if received.close_frame is not None:
            closing = frame_message(received.close_frame)
            assert closing["type"] == "error" and "request_id" not in closing
            COUNTS["fatal_closes"] += 1

    def run(self, request: wire.Request) -> None:
        command = to_engine_command(self, request)
        if isinstance(command, UnsupportedRequest):
            return
        COUNTS["engine_commands"] += 1
        self.absorb(self.engine.handle(command, self.now, self.mono))
        if isinstance(request, wire.FORWARDED):
            self.session.settle()

    def tick(self, ms: int) -> None:
        self.now += ms
        self.mono += ms
        self.absorb(self.engine.tick(self.now, self.mono))

    def absorb(self, outcome) -> None:
        """What ``Connection.deliver`` and the journal would do with an engine step."""
        for sequence, type_, schema, payload in journal_records(outcome.events):
            decode_event(type_, schema, payload)
            COUNTS["events"] += 1
        for effect in outcome.effects:
            if isinstance(effect, Refuse):
                frame = error_frame(effect.failure, effect.request_id)
            elif type(effect) is Reply:
                frame = message_frame(effect.type, effect.request_id, effect.fields)
                if effect.type == "enqueued":
                    self.jobs.append(effect.fields["job_id"])
            else:
                message = effect.message()
                frame = message_frame(message.pop("type"), message.pop("request_id", None),
                                       message)
                if "execution_id" in message:
                    self.executions.append((message["reservation_id"],
                                            message["execution_id"]))
            frame_message(frame)


@st.composite
def conversation(draw: st.DrawFn, peer: Peer) -> None:
    """Draw and feed one connection's worth of input, interactively (reports reuse the ids
    of real executions; status requests reuse real job ids)."""
    payloads: list[bytes] = []
    if not grammar.chance(draw, 5):  # most connections say hello first
        payloads.append(grammar.encode({"version": 1, "type": "hello", "request_id": "h",
                                        "mode": "worker", "runtime_id": "fuzz",
                                        "max_concurrency": draw(st.integers(1, 4))}))
        payloads.append(grammar.encode({"version": 1, "type": "register_tasks",
                                        "request_id": "t", "tasks": ["t", "demo.add"]}))
    for _ in range(draw(st.integers(1, 24))):
        message = draw(grammar.messages())
        if peer.executions and message.get("type") in ("started", "succeeded", "failed") \
                and draw(st.booleans()):
            message["reservation_id"], message["execution_id"] = draw(
                st.sampled_from(peer.executions))
        if peer.jobs and "job_id" in message and draw(st.booleans()):
            message["job_id"] = draw(st.sampled_from(peer.jobs))
        payloads.append(draw(grammar.mutated(grammar.encode(message))))
        if grammar.chance(draw, 3):  # feed what we have, let time pass
            data = grammar.frames(payloads, draw)
            COUNTS["frames"] += len(payloads)
            for piece in draw(grammar.chunked(data)):
                peer.feed(piece)
            payloads.clear()
            peer.tick(draw(st.sampled_from([0, 1, 50, 1_000, 31_000, 86_400_000])))
    data = grammar.frames(payloads, draw)
    COUNTS["frames"] += len(payloads)
    for piece in draw(grammar.chunked(data)):
        peer.feed(piece)
    peer.tick(draw(st.sampled_from([0, 1_000, 3_600_000])))


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(0, 2**32))
def test_hostile_frames_never_break_the_session_or_the_engine(data, seed) -> None:
    engine = Engine(EngineConfig(queues={"default": 4}, max_state_bytes=4 * 1024 * 1024),
                    random.Random(seed))
    peer = Peer(engine)
    COUNTS["connections"] += 1
    data.draw(conversation(peer))


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600), st.integers(1, 64))
def test_raw_bytes_never_break_the_session(noise, step) -> None:
    peer = Peer(Engine(EngineConfig(), random.Random(1)))
    COUNTS["raw_byte_streams"] += 1
    for start in range(0, len(noise), step):
        peer.feed(noise[start:start + step])
