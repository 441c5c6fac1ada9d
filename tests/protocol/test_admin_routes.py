"""The operations API's HTTP routes: path and query become the op's body (docs/admin.md)."""

from __future__ import annotations

import pytest

from tay.failures import RequestRefused
from tay.protocol.admin_api import route_admin


def test_scale_takes_an_integer_or_configured_for_null() -> None:
    request = route_admin("POST", ["queues", "mail", "scale"], "concurrency=25")
    assert (request.op, request.body) == ("scale_queue", {"queue": "mail", "concurrency": 25})
    request = route_admin("POST", ["queues", "mail", "scale"], "concurrency=configured")
    assert request.body == {"queue": "mail", "concurrency": None}
    # left out: the engine refuses it as required (tests/engine/test_admin_ops.py)
    assert route_admin("POST", ["queues", "mail", "scale"], "").body == {"queue": "mail"}


@pytest.mark.parametrize("query", ["concurrency=-1", "concurrency=2.5", "concurrency=",
                                   "concurrency=1234567", "concurrency=null",
                                   "concurrency=1&concurrency=2", "limit=3"])
def test_scale_refuses_a_bad_query(query: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        route_admin("POST", ["queues", "mail", "scale"], query)
    assert refused.value.code == "invalid_request"


def test_scale_is_a_post() -> None:
    with pytest.raises(RequestRefused) as refused:
        route_admin("GET", ["queues", "mail", "scale"], "concurrency=2")
    assert refused.value.code == "method_not_allowed"
