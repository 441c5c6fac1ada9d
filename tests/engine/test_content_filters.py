"""Jobs picked by their args (``jobs``, ``retry_jobs``, ``cancel_jobs`` with ``args``):
the matching rule against a plain reading of it, and the ops through an engine, packed
and column-held jobs included, with the per-page scan bound and its cursor."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tay.engine import Execute
from tay.engine import commands as c
from tay.engine import content_filters
from tay.engine.content_filters import args_match, error_match, same_json

from .conftest import Driver, refusal, reply

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False,
                                                                         allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8)


def admin(driver: Driver, op: str, **body) -> dict:
    return reply(driver.run(c.Admin("p", driver.rid(), op, body))).fields


def executes(out):
    return [e for e in out.effects if isinstance(e, Execute)]


@given(json_values)
def test_a_json_value_equals_itself(value):
    assert same_json(value, value)


@pytest.mark.parametrize("a, b, equal", [
    (1, 1.0, True), (True, 1, False), (False, 0, False), (True, True, True), (None, None, True),
    ("1", 1, False), ([1, 2], [1, 2], True), ([1, 2], [2, 1], False), ([1], [1, 1], False),
    ({"a": 1}, {"a": 1.0}, True), ({"a": 1}, {"a": 1, "b": 2}, False), ({"a": [True]},
                                                                        {"a": [1]}, False),
    (0.5, 0.5, True), ({}, [], False),
])
def test_values_are_equal_as_json_values(a, b, equal):
    assert same_json(a, b) is equal and same_json(b, a) is equal


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4),
       st.dictionaries(st.text(max_size=3), json_values, min_size=1, max_size=3))
def test_args_match_every_wanted_key_with_an_equal_value(args, wanted):
    expected = all(key in args and same_json(args[key], value) for key, value in wanted.items())
    assert args_match(args, wanted) is expected
    assert args_match({**args, **wanted}, wanted)  # what it asks for, it finds


def test_jobs_retry_jobs_and_cancel_jobs_pick_jobs_by_their_args():
    """Only the jobs whose args hold the filter are listed, retried or cancelled, packed
    ones included; the other filters combine with it; the reply says what it took."""
    driver = Driver()
    driver.engine.start_packing()
    driver.worker(capacity=100)

    def discarded(args: dict) -> str:
        (execute,) = executes(driver.enqueue(args=args))
        driver.fail(execute)
        return execute.job_id

    of_42 = [discarded({"account": 42, "n": n}) for n in range(3)]
    of_7 = [discarded({"account": 7, "n": n}) for n in range(2)]
    nested = discarded({"account": 42.0, "plan": {"tier": "gold", "seats": [1, 2]}})
    flag = discarded({"account": True})
    driver.engine.pack_finished(1000)
    driver.engine.pack_finished(1000)
    assert bytes.fromhex(of_42[0]) in driver.engine.finished.packed

    listed = admin(driver, "jobs", args={"account": 42})
    assert {row["id"] for row in listed["jobs"]} == set(of_42) | {nested}
    gold = admin(driver, "jobs", state="discarded", args={"plan": {"seats": [1, 2],
                                                                   "tier": "gold"}})
    assert [row["id"] for row in gold["jobs"]] == [nested]
    assert admin(driver, "jobs", args={"account": 1})["jobs"] == []  # true is not 1
    assert admin(driver, "jobs", state="completed", args={"account": 42})["jobs"] == []

    admin(driver, "pause_queue", queue="default")  # what is retried stays available
    done = admin(driver, "retry_jobs", state="discarded", args={"account": 42, "n": 1})
    assert (done["retried"], done["args"], done["next_cursor"]) == (
        1, {"account": 42, "n": 1}, None)
    assert driver.status(of_42[1])["state"] == "available"
    assert {driver.status(job_id)["state"] for job_id in of_42[::2] + of_7 + [flag]} == {
        "discarded"}
    cancelled = admin(driver, "cancel_jobs", state="available", args={"account": 42})
    assert cancelled["cancelled"] == 1 and driver.status(of_42[1])["state"] == "cancelled"


def test_an_args_page_examines_a_bounded_number_of_jobs_and_goes_on_by_cursor(monkeypatch):
    """With the scan bound at 3, a walk over 10 jobs that match none returns empty pages
    with cursors until the end; the matching one is found on its page, each job once."""
    monkeypatch.setattr(content_filters, "CONTENT_SCAN_LIMIT", 3)
    from tay.engine.handlers import admin as admin_ops
    monkeypatch.setattr(admin_ops, "CONTENT_SCAN_LIMIT", 3)
    driver = Driver()
    admin(driver, "pause_queue", queue="default")
    ids = [driver.job_id(args={"n": n}) for n in range(10)]
    wanted = ids[1]  # the walk goes newest first: found on the fourth page (n = 9..0)
    pages, found, cursor = 0, [], None
    while True:
        page = admin(driver, "jobs", args={"n": 1}, **({"cursor": cursor} if cursor else {}))
        pages += 1
        found += [row["id"] for row in page["jobs"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert found == [wanted] and pages == 4
    cancelled, cursor, calls = 0, None, 0
    while True:
        done = admin(driver, "cancel_jobs", state="available", args={"n": 1},
                     **({"cursor": cursor} if cursor else {}))
        cancelled += done["cancelled"]
        calls += 1
        if (cursor := done["next_cursor"]) is None:
            break
    assert cancelled == 1 and calls == 4
    assert driver.status(wanted)["state"] == "cancelled"


@pytest.mark.parametrize("args", [[], "x", {}, 42, {f"k{n}": n for n in range(17)},
                                  {"a": [[[[[[[[[1]]]]]]]]]}])
@pytest.mark.parametrize("op, extra", [("jobs", {}), ("retry_jobs", {"state": "discarded"}),
                                       ("cancel_jobs", {"state": "available"})])
def test_a_bad_args_filter_is_refused(op, extra, args):
    out = Driver().run(c.Admin("p", "r", op, {**extra, "args": args}))
    assert refusal(out)["code"] == "invalid_request"


@pytest.mark.parametrize("failure, wanted, found", [
    ({"type": "TimeoutError", "message": "no reply"}, "timeout", True),
    ({"type": "ValueError", "message": "bad Account 42"}, "account 42", True),
    ({"type": "ValueError", "message": "bad input"}, "KeyError", False),
    ({"message": "STRASSE"}, "straße", True),  # case-folded, not just lowered
    (None, "error", False), ({}, "x", False),
])
def test_an_error_filter_looks_in_the_type_and_the_message(failure, wanted, found):
    assert error_match(failure, wanted.casefold()) is found


def test_jobs_and_bulk_ops_pick_jobs_by_their_last_failure():
    driver = Driver()
    driver.worker(capacity=10)
    for message in ("upstream timed out", "card declined", "Timed Out again"):
        (execute,) = executes(driver.enqueue(retries=0, args={"m": message}))
        driver.fail(execute, {"type": "RuntimeError", "message": message})
    (ok,) = executes(driver.enqueue())
    driver.succeed(ok)
    listed = admin(driver, "jobs", error="TIMED OUT")
    assert sorted(driver.status(row["id"])["state"] for row in listed["jobs"]) == [
        "discarded", "discarded"]
    assert {admin(driver, "job", job_id=row["id"])["job"]["args"]["m"]
            for row in listed["jobs"]} == {"upstream timed out", "Timed Out again"}
    assert len(admin(driver, "jobs", error="runtimeerror")["jobs"]) == 3
    assert admin(driver, "jobs", error="declined", args={"m": "card declined"})["jobs"]
    done = admin(driver, "delete_jobs", state="discarded", error="declined")
    assert (done["deleted"], done["error"]) == (1, "declined")
    assert len(admin(driver, "jobs", state="discarded")["jobs"]) == 2
    for bad in ("", "x" * 201, 42):
        assert refusal(driver.run(c.Admin("p", "r", "jobs", {"error": bad})))["code"] == \
            "invalid_request"
