"""benchmarks.engine_calls routes exactly its target through operator.call, and undoes it."""

from __future__ import annotations

import operator

import pytest

from benchmarks import engine_calls
from tay.engine.handlers import producer
from tay.engine.core import Engine


@pytest.mark.parametrize("target, expected", [("Succeeded", 3), ("Started", 3),
                                              ("tay.engine.handlers.producer:parse_enqueue", 3)])
def test_the_target_alone_goes_through_operator_call(tmp_path, monkeypatch, target, expected):
    handle, parse = Engine.handle, producer.parse_enqueue
    routed = []
    real_call = operator.call

    def counting_call(function, *args, **kwargs):
        routed.append(function)
        return real_call(function, *args, **kwargs)

    monkeypatch.setattr(operator, "call", counting_call)
    engine_calls.main([target, "--jobs", "3", "--dir", str(tmp_path)])
    assert len(routed) == expected
    assert Engine.handle is handle and producer.parse_enqueue is parse  # undone
    assert list(tmp_path.iterdir()) == []  # its store removed
