"""Reply frames: the per-job fast paths write what the general message path writes."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tay.engine.effects import Execute
from tay.protocol.replies import execute_frame, message_frame
from tests.storage.json_strategies import SETTINGS, json_values

ids = st.text(min_size=1, max_size=12)


@SETTINGS
@given(ids, ids, ids, ids, st.dictionaries(st.text(max_size=6), json_values, max_size=4),
       st.integers(1, 86_400_000))
def test_execute_frame_is_the_message_frame(reservation, execution, job, task, args, timeout):
    effect = Execute("conn", reservation, execution, job, task,
                     orjson.dumps(args, option=orjson.OPT_SORT_KEYS), timeout, "q")
    message = effect.message()
    general = message_frame(message.pop("type"), message.pop("request_id", None), message)
    assert execute_frame(effect) == general
    assert orjson.loads(general[4:])["args"] == args


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=40))
def test_a_reply_without_fields_is_framed_like_its_envelope(message_type, request_id):
    frame = message_frame(message_type, request_id, {})
    envelope = {"version": 1, "type": message_type, "request_id": request_id}
    assert frame[4:] == orjson.dumps(envelope)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


@SETTINGS
@given(st.text(min_size=1, max_size=12), st.none() | st.text(min_size=1, max_size=40),
       st.dictionaries(st.text(max_size=6), json_values, max_size=4))
def test_a_reply_is_its_envelope_encoded_and_framed(message_type, request_id, fields):
    """message_frame writes what encode_frame(encode_json(envelope)) writes, request_id
    omitted only for uncorrelated errors and fields after the envelope's keys."""
    from tay.protocol.framing import encode_frame
    from tay.protocol.values import encode_json

    envelope = {"version": 1, "type": message_type}
    if request_id is not None:
        envelope["request_id"] = request_id
    envelope.update(fields)
    assert message_frame(message_type, request_id, fields) == encode_frame(encode_json(envelope))


@SETTINGS
@given(st.sampled_from(["version", "type", "request_id"]), json_values,
       st.dictionaries(st.text(max_size=6), json_values, max_size=3), st.booleans())
def test_a_field_named_like_the_envelope_wins_as_a_dict_update(key, value, others, first):
    """A field that repeats an envelope key is merged as a dict update: the field's value
    wins, in the envelope's place (a fast path that splices fields must keep this)."""
    from tay.protocol.framing import encode_frame
    from tay.protocol.values import encode_json

    fields = {key: value, **others} if first else {**others, key: value}
    envelope = {"version": 1, "type": "status", "request_id": "r1"}
    envelope.update(fields)
    assert message_frame("status", "r1", fields) == encode_frame(encode_json(envelope))


@SETTINGS
@given(st.text(min_size=1, max_size=12), st.none() | st.text(min_size=1, max_size=40),
       st.dictionaries(st.text(max_size=6), json_values, max_size=4),
       st.lists(st.binary(min_size=1, max_size=8), max_size=2))
def test_frames_queued_as_pieces_are_the_frames(message_type, request_id, fields, queued):
    """message_frame_into appends pieces whose join is message_frame's frame, after what
    the list held already (a connection joins its queue once per write)."""
    from tay.protocol.replies import message_frame_into

    for reply_fields in (fields, {}):
        out = list(queued)
        message_frame_into(out, message_type, request_id, reply_fields)
        assert out[:len(queued)] == queued
        assert b"".join(out[len(queued):]) == message_frame(message_type, request_id,
                                                            reply_fields)


@SETTINGS
@given(ids, ids, ids, ids, st.binary(max_size=70_000).map(lambda b: orjson.dumps(b.hex())),
       st.integers(0, 2**63 - 1))
def test_an_execute_queued_as_pieces_is_the_execute_frame(reservation, execution, job, task,
                                                         args_json, timeout):
    """Also past the prefix cache's lengths (args up to 140 kB)."""
    from tay.protocol.replies import execute_frame_into

    effect = Execute("conn", reservation, execution, job, task, args_json, timeout, "q")
    out: list[bytes] = [b"x"]
    execute_frame_into(out, effect)
    assert out[0] == b"x" and b"".join(out[1:]) == execute_frame(effect)
    message = effect.message()  # the general path, which frames no Execute of its own
    general = message_frame(message.pop("type"), message.pop("request_id", None), message)
    assert b"".join(out[1:]) == general
