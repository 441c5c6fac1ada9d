"""The fused commits' payloads (tay.engine.retained.payloads) read as the event builders' payloads.

Each kind is compared with the payload the general path's builder makes for the same values
(a ``dict`` in a ``MappingProxyType``): the same keys in the same order, the same items,
equal both ways, and the same refusals (unknown key, assignment, hashing).
"""

from __future__ import annotations

from types import MappingProxyType

import orjson
import pytest

from tay.engine.retained.payloads import (
    FinishedPayload, InsertedPayload, ResultPayload, StartedPayload, fields_payload,
)
from tay.storage import events as ev
from tay.storage.events.definition import LazyDefinition

JOB = bytes(range(1, 17))
AT = 1_800_000_000_123
DEFINITION = LazyDefinition.from_args_json(orjson.dumps({"a": 1}), 3, worker_key="t",
                                           queue_key="q", max_attempts=3, scheduled_at=None,
                                           timeout_ms=1_000)


def cases():
    """(built by the general path's builder, the fused commit's payload of the same values)."""
    return [
        (ev.job_inserted(JOB, AT, DEFINITION),
         fields_payload(InsertedPayload, (AT, DEFINITION, AT, 0, JOB))),
        (ev.job_started(JOB, AT, 1, 1, 7),
         fields_payload(StartedPayload, (AT, 1, 7, 1, JOB))),
        (ev.job_finished(JOB, AT, 2, execution_token=2, outcome=ev.SUCCESS,
                         diagnostic_code=None, disposition=ev.COMPLETED),
         fields_payload(FinishedPayload, (AT, None, ev.COMPLETED, 2, 2, JOB, None, None,
                                          ev.SUCCESS))),
        (ev.result_recorded(JOB, AT, 3, None),
         fields_payload(ResultPayload, (AT, 3, JOB, None))),
    ]


@pytest.mark.parametrize("index", range(4))
def test_a_payload_reads_as_the_builders(index):
    built, payload = cases()[index]
    expected = built.payload
    assert type(expected) is MappingProxyType
    assert list(payload) == list(expected) and len(payload) == len(expected)
    assert list(payload.keys()) == list(expected.keys())
    assert list(payload.items()) == list(expected.items())
    assert list(payload.values()) == list(expected.values())
    assert payload == expected and expected == payload and payload == dict(expected)
    assert not payload != expected
    assert dict(payload) == dict(expected) and payload.copy() == expected.copy()
    assert {**payload} == {**expected}
    for key in expected:
        assert payload[key] == expected[key] and key in payload
        assert payload.get(key, "missing") == expected.get(key, "missing")
    assert payload.get("nope") is None and "nope" not in payload
    assert payload != {**expected, "extra": 1}
    if expected["at"] == AT:
        assert payload != {**expected, "at": AT + 1}


@pytest.mark.parametrize("index", range(4))
def test_a_payload_refuses_what_the_proxy_refuses(index):
    built, payload = cases()[index]
    with pytest.raises(KeyError):
        payload["nope"]
    with pytest.raises(TypeError):
        payload["at"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(payload)
    with pytest.raises(TypeError):
        hash(built.payload)


def test_an_event_with_a_payload_equals_the_builders():
    """Events compare their payloads: a fused commit's event equals the general one."""
    for built, payload in cases():
        fused = ev.Event(built.type, built.schema, built.name, payload, None)
        assert fused == built and built == fused
