"""Hypothesis strategies for hostile input: protocol messages built from the real field
names with values at and past every bound, then framed, mutated and split.

Values come from a table of the edges the code checks (64-bit and timestamp limits,
floats that overflow when scaled, empty and oversized strings, wrong types), mixed with
arbitrary JSON, so most messages pass the envelope and reach the engine's option, schedule
and report checks instead of dying at the first byte.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tay.engine.validation.options import OPTION_KEYS
from tay.engine.schedules.declaration import REQUEST_FIELDS
from tay.protocol.admin_api import ROUTES

EDGE_NUMBERS = [0, 1, -1, 2, 59, 60, 255, 256, 65_534, 65_535, 65_536, 86_400, 86_400_000,
                86_400_001, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -(2**63),
                0.0, -0.0, 0.4, 0.5, 1.5, 2.5, 1e-300, 1e16, 1e300, 1e308, -1e308]
# outside the protocol's value domain: the whole connection closes, so they come rarely
FATAL_VALUES = [float("inf"), 2**64, 10**30, -(2**63) - 1, "\ud800", {"k" * 4097: 1}]
EDGE_STRINGS = ["", " ", "x", "a" * 129, "a" * 256, "\x00", "\u2028", "é",
                "\U0001f600", "default", "* * * * *", "0 0 30 2 *", "61 * * * *",
                "*/0 * * * *", "1-0 * * * *", "+25", "-00:60", "UTC", "Z", "+14:00",
                "Europe/Kyiv", "exponential", "persistent", "volatile", "latest", "all",
                "allow", "skip", "queue", "0" * 32, "f" * 32, "00" * 15 + "01", "A" * 43]
scalars = (st.sampled_from(EDGE_NUMBERS) | st.sampled_from(EDGE_STRINGS) | st.none()
           | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.sampled_from(EDGE_STRINGS), inner, max_size=4),
    max_leaves=16)
keys = st.sampled_from(["t", "demo.add", "a.b", "default", "q2"]) | st.sampled_from(EDGE_STRINGS)
identifiers = st.sampled_from(["r1", "r2", "x", "s1", "w"]) | st.sampled_from(EDGE_STRINGS)
UNITS = ["seconds", "minutes", "hours", "days", "weeks"]


def chance(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (hypothesis favours 0 and the bounds, so the
    middle value is the rare one)."""
    return draw(st.integers(0, one_in - 1)) == one_in // 2


def some_of(fields: dict[str, st.SearchStrategy],
            required: tuple[str, ...] = ()) -> st.SearchStrategy[dict[str, Any]]:
    """``required`` fields (each left out one time in ten) and any subset of the others,
    each with its own strategy or, one time in four, any JSON value."""
    names = sorted(set(fields) - set(required))

    def build(chosen: list[str], dropped: bool) -> st.SearchStrategy[dict[str, Any]]:
        present = [*(required[1:] if dropped else required), *chosen]
        return st.fixed_dictionaries({name: st.one_of(fields[name], fields[name],
                                                      fields[name], json_values)
                                      for name in present})

    return st.tuples(st.lists(st.sampled_from(names), unique=True, max_size=min(3, len(names)))
                     if names else st.just([]),
                     st.integers(0, 9).map(lambda n: n == 5)).flatmap(lambda t: build(*t))


small_numbers = st.integers(0, 5) | st.floats(0, 5) | st.sampled_from(EDGE_NUMBERS)
# durations and instants at the edges of milliseconds, seconds and signed 64 bits: scaled by
# 1000 (or a unit), rounded, added to now
TIME_EDGES = [0, 0.0004, 0.0005, 1, 59.9995, 86_400, 86_400.0005, 9_223_372_036_854_775,
              9.2e15, 1e16, 2**53, 2**63 - 1, 2**63, 10**19, 1e300, 1e306, 5e307, 1e308,
              1.7976931348623157e308, -1, -0.0, 0.5]
times = st.sampled_from(TIME_EDGES) | small_numbers
OPTION_VALUES: dict[str, st.SearchStrategy] = {
    "id": st.sampled_from(["ab" * 16, "0" * 32, "AB" * 16, "1"]), "submission_id": identifiers,
    "delay": times, "delay_ms": times, "run_at": times,
    "retries": small_numbers, "timeout": times, "timeout_ms": times,
    "backoff": st.sampled_from(["exponential", "linear", ""]), "queue": keys,
    "durability": st.sampled_from(["persistent", "volatile", "x"]),
}
options = some_of({name: OPTION_VALUES.get(name, scalars)
                   for name in sorted(OPTION_KEYS | {"priority"})})
_SCHEDULE_VALUES = {
    "declaration_id": identifiers, "task": keys, "options": options,
    "args": st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    "cron": st.sampled_from(EDGE_STRINGS), "timezone": st.sampled_from(EDGE_STRINGS),
    "every": st.dictionaries(st.sampled_from(UNITS), times | scalars, max_size=2),
    "catch_up": st.sampled_from(["latest", "all"]) | st.sampled_from(EDGE_STRINGS),
    "overlap": st.sampled_from(["allow", "skip", "queue"]) | st.sampled_from(EDGE_STRINGS),
    "delay": times, "start_at": times, "cursor": identifiers, "schedule_id": identifiers,
}
# every field the engine's declaration reads, plus the page and id fields of the reads
schedule_fields = some_of({name: _SCHEDULE_VALUES.get(name, scalars)
                           for name in REQUEST_FIELDS | {"limit", "cursor", "schedule_id"}})

@st.composite
def declarations(draw: st.DrawFn) -> dict[str, Any]:
    """A schedule that passes the first checks (task, exactly one timing), so the rest of
    its fields, drawn at their edges, reach the deeper checks (start, options, overlap)."""
    base: dict[str, Any] = {"task": "t"}
    if draw(st.booleans()):
        base["every"] = {draw(st.sampled_from(UNITS[:4])): draw(times)}
    else:
        base["cron"] = draw(st.sampled_from(["* * * * *", "*/5 * * * *", "0 9 * * 1-5"])
                            | st.sampled_from(EDGE_STRINGS))
    extra = draw(st.lists(st.sampled_from(sorted(REQUEST_FIELDS - {"task", "every", "cron"})),
                          unique=True, max_size=4))
    for name in extra:
        base[name] = draw(_SCHEDULE_VALUES.get(name, scalars))
    return base


BODIES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "hello": some_of({"mode": st.sampled_from(["client", "embedded", "worker", "x"]),
                      "runtime_id": identifiers, "max_concurrency": scalars}),
    "register_tasks": some_of({"tasks": st.lists(keys, max_size=4)}),
    "unregister_tasks": some_of({"tasks": st.lists(keys, max_size=4)}),
    "enqueue": some_of({"task": st.sampled_from(["t", "t", "demo.add"]) | keys,
                        "args": st.dictionaries(st.text(max_size=4), json_values, max_size=4),
                        "options": options}, required=("task", "args")),
    "status": some_of({"job_id": st.sampled_from(EDGE_STRINGS)}),
    "result": some_of({"job_id": st.sampled_from(EDGE_STRINGS)}),
    "cancel": some_of({"job_id": st.sampled_from(EDGE_STRINGS)}),
    "schedule": st.one_of(declarations(), declarations(), declarations(), schedule_fields),
    "cancel_schedule": schedule_fields,
    "schedules": schedule_fields, "schedule_status": schedule_fields,
    "started": some_of({"reservation_id": identifiers, "execution_id": identifiers,
                        "job_id": identifiers}),
    "succeeded": some_of({"reservation_id": identifiers, "execution_id": identifiers,
                          "result": json_values}),
    "failed": some_of({"reservation_id": identifiers, "execution_id": identifiers,
                       "error": some_of({"type": scalars, "message": scalars,
                                         "traceback": scalars})}),
    "heartbeat": st.just({}), "ping": some_of({"ping_id": identifiers}),
    "pong": some_of({"ping_id": identifiers}), "register_schedules": st.just({}),
    **{f"admin_{op}": some_of({"job_id": identifiers, "queue": keys, "schedule_id": identifiers,
                               "limit": scalars, "state": scalars, "cursor": identifiers,
                               "concurrency": scalars})
       for op in ROUTES if op != "compact"},
}


# what a conversation is made of: mostly producer calls and execution reports
WEIGHTED_TYPES = sorted(k for k in BODIES if not k.startswith("admin_")) + [
    "admin_status", "admin_jobs", "admin_cancel_job"] + ["enqueue"] * 12 + ["schedule"] * 6 + [
    "status", "result", "cancel", "started", "succeeded", "failed"] * 3 + [
    "cancel_schedule", "schedule_status", "schedules"] * 2


@st.composite
def messages(draw: st.DrawFn, known_ids: list[str] | None = None) -> dict[str, Any]:
    """One message: a known type (mostly) with a plausible envelope and fields."""
    hostile = chance(draw, 100)  # one message in a hundred breaks the envelope
    kind = draw(st.text(max_size=8) if hostile and draw(st.booleans())
                else st.sampled_from(WEIGHTED_TYPES))
    body = dict(draw(BODIES.get(kind, st.just({}))))
    envelope: dict[str, Any] = {"version": 1, "type": kind,
                                "request_id": draw(st.sampled_from(["r1", "r2", "q", "r:1"]))}
    if hostile:
        field = draw(st.sampled_from(["version", "v", "request_id", "type", "x"]))
        envelope[field] = draw(st.sampled_from([2, "1", True, 1.0, None, 7, ["r"], "",
                                                *FATAL_VALUES]))
    return {**envelope, **body}


def encode(message: dict[str, Any]) -> bytes:
    """JSON text as a careless client writes it: big integers kept, Infinity allowed."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def mutated(draw: st.DrawFn, payload: bytes) -> bytes:
    """Usually ``payload`` itself; sometimes a byte flipped, cut, doubled or a key repeated."""
    how = draw(st.integers(0, 199)) - 100  # -100..99: 0..3 pick a mutation, 4% in all
    if how == 0 and payload:
        at = draw(st.integers(0, len(payload) - 1))
        return payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1:]
    if how == 1:
        return payload[:draw(st.integers(0, len(payload)))]
    if how == 2 and payload.startswith(b"{") and len(payload) > 2:
        return b'{"request_id":"dup",' + payload[1:]
    if how == 3:
        return payload + draw(st.binary(max_size=8))
    return payload


def frames(payloads: list[bytes], draw: st.DrawFn) -> bytes:
    """Length-prefixed frames, with the odd wrong length among them."""
    out = bytearray()
    for payload in payloads:
        length = len(payload)
        if chance(draw, 100):
            length = draw(st.sampled_from([0, 1, length + 1, 2**31, 2**32 - 1]))
        out += length.to_bytes(4, "big") + payload
    return bytes(out)


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` split at random points, as reads deliver it."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    pieces, start = [], 0
    for cut in cuts + [len(data)]:
        pieces.append(data[start:cut])
        start = cut
    return [piece for piece in pieces if piece]
