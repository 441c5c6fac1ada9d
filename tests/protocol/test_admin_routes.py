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


def test_bulk_routes_win_over_a_job_id_and_take_their_filters() -> None:
    request = route_admin("POST", ["jobs", "cancel"], "state=available&task=mail.send&limit=5")
    assert (request.op, request.body) == ("cancel_jobs", {"state": "available",
                                                          "task": "mail.send", "limit": 5})
    assert route_admin("POST", ["jobs", "retry"], "state=discarded").op == "retry_jobs"
    assert route_admin("POST", ["jobs", "delete"], "state=completed").op == "delete_jobs"
    request = route_admin("POST", ["jobs", "0" * 32, "delete"], "")
    assert (request.op, request.body) == ("delete_job", {"job_id": "0" * 32})
    assert route_admin("GET", ["jobs", "0" * 32], "").op == "job"
    with pytest.raises(RequestRefused) as refused:
        route_admin("POST", ["jobs", "cancel"], "job_id=1")
    assert refused.value.code == "invalid_request"


@pytest.mark.parametrize("op", ["pause", "resume"])
def test_schedule_pause_and_resume_are_posts_on_the_schedule(op: str) -> None:
    request = route_admin("POST", ["schedules", "nightly", op], "")
    assert (request.op, request.body) == (f"{op}_schedule", {"schedule_id": "nightly"})
    with pytest.raises(RequestRefused) as refused:
        route_admin("GET", ["schedules", "nightly", op], "")
    assert refused.value.code == "method_not_allowed"


def test_limit_takes_starts_and_period_or_none_for_null() -> None:
    request = route_admin("POST", ["queues", "api", "limit"], "starts=10&period_ms=1000")
    assert (request.op, request.body) == ("limit_queue", {"queue": "api", "starts": 10,
                                                          "period_ms": 1000})
    request = route_admin("POST", ["queues", "api", "limit"], "starts=none&period_ms=none")
    assert request.body == {"queue": "api", "starts": None, "period_ms": None}


@pytest.mark.parametrize("query", ["starts=-1&period_ms=1", "starts=1&period_ms=1s",
                                   "starts=1234567&period_ms=1", "starts=null",
                                   "concurrency=2", "starts=1&starts=2"])
def test_limit_refuses_a_bad_query(query: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        route_admin("POST", ["queues", "api", "limit"], query)
    assert refused.value.code == "invalid_request"


def test_args_is_a_json_object_in_the_query() -> None:
    request = route_admin("GET", ["jobs"], "args=%7B%22account%22%3A42%7D&state=available")
    assert request.body == {"args": {"account": 42}, "state": "available"}
    request = route_admin("POST", ["jobs", "delete"], "state=completed&args=%5B1%5D")
    assert request.body["args"] == [1]  # JSON, not an object: the engine refuses it
    with pytest.raises(RequestRefused) as refused:
        route_admin("GET", ["jobs"], "args=%7Bnot+json")
    assert (refused.value.code, refused.value.details["field"]) == ("invalid_request", "args")


def test_history_takes_days_as_an_integer_and_nothing_else() -> None:
    request = route_admin("GET", ["history"], "days=90")
    assert (request.op, request.body) == ("history", {"days": 90})
    assert route_admin("GET", ["history"], "").body == {}
    for query in ("days=-1", "days=7d", "days=1234567", "limit=3", "days=1&days=2"):
        with pytest.raises(RequestRefused) as refused:
            route_admin("GET", ["history"], query)
        assert refused.value.code == "invalid_request"
    with pytest.raises(RequestRefused) as refused:
        route_admin("POST", ["history"], "")
    assert refused.value.code == "method_not_allowed"
