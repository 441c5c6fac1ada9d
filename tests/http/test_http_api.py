"""Sans-IO routing, bodies and status mapping of ``tay.protocol.http_api``."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from tay.engine.effects import Refuse, Reply
from tay.failures import RequestRefused
from tay.protocol.http_api import (
    HttpApi, HttpRequest, HttpResponse, ProducerCall, RegisterWorker, WorkerCall,
    effect_response, json_response,
)
from tay.protocol.requests import Failed, Succeeded

API = HttpApi()
HOST = ((b"host", b"t"),)
JSON = ((b"content-type", b"application/json"),)
TOKEN = "A" * 43


def route(method, target, body=None, headers=JSON):
    raw = orjson.dumps(body) if isinstance(body, (dict, list)) else (body or b"")
    return API.route(HttpRequest(method, target, HOST + headers, raw))


def error_of(result) -> tuple[int, str]:
    assert isinstance(result, HttpResponse), result
    return result.status, orjson.loads(result.body)["error"]["code"]


def bearer(token=TOKEN):
    return JSON + ((b"authorization", f"Bearer {token}".encode()),)


def test_enqueue_route_keeps_task_args_options():
    call = route("POST", "/jobs", {"task": "a.b", "args": {"x": 1}, "options": {"retries": 2}})
    assert call == ProducerCall("enqueue", {"task": "a.b", "args": {"x": 1},
                                            "options": {"retries": 2}})


@pytest.mark.parametrize("body, field", [
    ({"task": "a", "args": {}, "extra": 1}, "extra"),
    ({"task": "", "args": {}}, "task"),
    ({"task": "a", "args": []}, "args"),
    ({"task": "a", "args": {}, "options": 3}, "options"),
])
def test_enqueue_body_errors_name_the_field(body, field):
    result = route("POST", "/jobs", body)
    assert error_of(result) == (400, "invalid_enqueue")
    assert orjson.loads(result.body)["error"]["field"] == field


@pytest.mark.parametrize("headers", [
    (), ((b"content-type", b"text/plain"),),
    JSON + JSON, ((b"content-type", b"application/jsonx"),),
])
def test_body_routes_need_exactly_one_json_content_type(headers):
    assert error_of(route("POST", "/jobs", {"task": "a", "args": {}}, headers)) == (
        415, "unsupported_media_type")


def test_content_type_parameters_and_case_are_accepted():
    headers = ((b"content-type", b"Application/JSON; charset=utf-8"),)
    assert isinstance(route("POST", "/jobs", {"task": "a", "args": {}}, headers), ProducerCall)


@pytest.mark.parametrize("raw", [b"{", b"[1]", b"\"x\"", b"", b"\xff", b'{"a": NaN}'])
def test_bodies_that_are_not_json_objects(raw):
    assert error_of(route("POST", "/jobs", raw)) == (400, "invalid_json_object")


def test_body_outside_the_value_domain_is_invalid_json_object():
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["a"] = {}
        node = node["a"]
    assert error_of(route("POST", "/jobs", {"task": "a", "args": deep})) == (
        400, "invalid_json_object")


def test_body_over_the_limit_is_413():
    api = HttpApi(max_body_bytes=10)
    result = api.route(HttpRequest("POST", "/jobs", HOST + JSON, b'{"task":"a","args":{}}'))
    assert error_of(result) == (413, "request_too_large")


def test_job_routes():
    assert route("GET", "/jobs/abc") == ProducerCall("status", {"job_id": "abc"})
    assert route("DELETE", "/jobs/abc") == ProducerCall("cancel", {"job_id": "abc"})
    assert route("GET", "/jobs/abc/result") == ProducerCall("result", {"job_id": "abc"})
    assert error_of(route("GET", "/jobs/" + "x" * 129)) == (404, "not_found")
    assert error_of(route("GET", "/jobs/abc/other")) == (404, "not_found")


@pytest.mark.parametrize("method, target, allow", [
    ("PUT", "/jobs", b"POST"), ("POST", "/jobs/abc", b"GET, DELETE"),
    ("GET", "/workers", b"POST, DELETE"), ("GET", "/queues/q/claim", b"POST"),
])
def test_wrong_method_is_405_with_allow(method, target, allow):
    result = route(method, target)
    assert error_of(result) == (405, "method_not_allowed")
    assert (b"allow", allow) in result.headers


@pytest.mark.parametrize("target", ["/", "/nope", "/queues/q", "/workers/x/y",
                                    "http://h/nope", "http://h"])
def test_unknown_routes_are_404(target):
    assert error_of(route("GET", target)) == (404, "not_found")


@pytest.mark.parametrize("target", ["relative", "*", "127.0.0.1:80", "ftp://h/jobs/abc",
                                    "http:///jobs/abc"])
def test_targets_that_are_neither_paths_nor_absolute_urls_are_400(target):
    assert error_of(route("GET", target)) == (400, "invalid_request")


@pytest.mark.parametrize("target", ["http://127.0.0.1:8080/jobs/abc",
                                    "HTTPS://tay.example/jobs/abc?x=1"])
def test_absolute_form_targets_are_served_like_their_path(target):
    assert route("GET", target) == ProducerCall("status", {"job_id": "abc"})


def test_absolute_form_keeps_the_query():
    assert route("GET", "http://h:1/schedules?limit=2") == route("GET", "/schedules?limit=2")
    assert error_of(route("GET", "http://h?limit=2")) == (404, "not_found")


@pytest.mark.parametrize("hosts", [(), ((b"host", b"a"), (b"host", b"b"))])
def test_http_1_1_needs_exactly_one_host(hosts):
    result = API.route(HttpRequest("GET", "/jobs/abc", hosts, b""))
    assert error_of(result) == (400, "invalid_request")
    assert orjson.loads(result.body)["error"]["field"] == "host"


def test_http_1_0_and_2_need_no_host_header():
    for version in ("1.0", "2"):
        assert API.route(HttpRequest("GET", "/jobs/abc", (), b"", version)) == ProducerCall(
            "status", {"job_id": "abc"})


@pytest.mark.parametrize("raw", [
    b'{"task":"a","task":"b","args":{}}',
    b'{"task":"a","args":{"x":1,"x":2}}',
    b'{"task":"a:b","args":{"u":"http://x","k":{"y":"\\":","y":0}}}',
    b'{"task" : "a" , "task" : "a"}',
])
def test_duplicate_keys_are_invalid_json_object(raw):
    result = route("POST", "/jobs", raw)
    assert error_of(result) == (400, "invalid_json_object")
    assert "duplicate object key" in orjson.loads(result.body)["error"]["message"]


def test_colons_inside_strings_are_not_duplicates():
    body = b'{"task":"a:b","args":{"u":"http://x:1/\\":y","t":"12:00"},"options":{}}'
    assert route("POST", "/jobs", body) == ProducerCall(
        "enqueue", {"task": "a:b", "args": {"u": 'http://x:1/":y', "t": "12:00"},
                    "options": {}})


def test_schedule_routes_and_page_bounds():
    assert route("GET", "/schedules") == ProducerCall("schedules", {"limit": 50})
    assert route("GET", "/schedules?limit=100&cursor=s1") == ProducerCall(
        "schedules", {"limit": 100, "cursor": "s1"})
    assert route("GET", "/schedules/s1") == ProducerCall("schedule_status",
                                                         {"schedule_id": "s1"})
    assert route("DELETE", "/schedules/s1") == ProducerCall("cancel_schedule",
                                                            {"schedule_id": "s1"})
    for query in ("limit=0", "limit=101", "limit=x", "limit=-1", "other=1"):
        assert error_of(route("GET", "/schedules?" + query))[0] == 400


def test_worker_registration_defaults_and_refusals():
    ok = route("POST", "/workers", {"runtime_id": "r", "tasks": ["a"], "capacity": 3})
    assert ok == RegisterWorker("r", ("a",), 3, "default")
    for body in ({"runtime_id": "r", "tasks": ["a"], "capacity": 0},
                 {"runtime_id": "r", "tasks": ["a"], "capacity": 257},
                 {"runtime_id": "r", "tasks": [], "capacity": 1},
                 {"runtime_id": "r", "tasks": ["a", "a"], "capacity": 1},
                 {"runtime_id": "", "tasks": ["a"], "capacity": 1},
                 {"runtime_id": "r", "tasks": ["a"], "capacity": 1, "queue": ""},
                 {"runtime_id": "r", "tasks": ["a"], "capacity": True}):
        assert error_of(route("POST", "/workers", body)) == (400, "invalid_worker"), body


@pytest.mark.parametrize("value", [
    None, b"Bearer", b"Bearer " + b"A" * 42, b"Bearer " + b"A" * 44, b"Basic " + b"A" * 43,
    b"Bearer " + b"A" * 42 + b"=",
])
def test_bad_authorization_is_401_unauthorized(value):
    headers = JSON if value is None else JSON + ((b"authorization", value),)
    assert error_of(route("POST", "/queues/q/claim", headers=headers)) == (401, "unauthorized")


def test_auth_is_checked_before_the_body():
    result = route("POST", "/workers/started", b"not json", headers=JSON)
    assert error_of(result) == (401, "unauthorized")


def test_worker_calls():
    assert route("POST", "/queues/q/claim", headers=bearer()) == WorkerCall("claim", TOKEN, "q")
    assert route("DELETE", "/workers", headers=bearer()) == WorkerCall("close", TOKEN)
    started = route("POST", "/workers/started", {"reservation_id": "r", "execution_id": "e"},
                    headers=bearer())
    assert started == WorkerCall("started", TOKEN, report=("r", "e"))


def test_completion_bodies():
    ids = {"reservation_id": "r", "execution_id": "e"}
    ok = route("POST", "/workers/complete", {**ids, "outcome": "success", "result": None},
               headers=bearer())
    assert isinstance(ok.report, Succeeded) and ok.report.result is None
    failed = route("POST", "/workers/complete",
                   {**ids, "outcome": "failure", "error": {"type": "E", "message": "m"}},
                   headers=bearer())
    assert isinstance(failed.report, Failed) and failed.report.error == {"type": "E",
                                                                         "message": "m"}
    for body in ({**ids, "outcome": "success"}, {**ids, "outcome": "maybe", "result": 1},
                 {**ids, "outcome": "failure", "error": "x"},
                 {**ids, "outcome": "failure", "error": {}},
                 {**ids, "outcome": "failure", "error": {"type": "x" * 129}}):
        assert error_of(route("POST", "/workers/complete", body, headers=bearer())) == (
            400, "invalid_completion"), body
    big = {**ids, "outcome": "success", "result": "x" * 70_000}
    assert error_of(route("POST", "/workers/complete", big, headers=bearer())) == (
        400, "result_too_large")
    missing = {"reservation_id": "r", "outcome": "success", "result": 1}
    assert error_of(route("POST", "/workers/complete", missing, headers=bearer())) == (
        400, "invalid_execution")


@pytest.mark.parametrize("code, status", [
    ("result_missing", 410), ("task_cancelled", 409), ("task_failed", 409),
    ("result_not_ready", 409), ("unavailable", 503), ("not_found", 404), ("capacity", 429),
    ("unknown_outcome", 503),
])
def test_refusals_use_the_wire_table(code, status):
    response = effect_response(Refuse(None, "r", RequestRefused("m", code=code)), 1 << 20)
    assert response.status == status
    assert orjson.loads(response.body)["error"]["code"] == code


def test_replies_carry_type_and_enqueue_is_201():
    enqueued = effect_response(Reply(None, "r", "enqueued", {"job_id": "j"}), 1 << 20)
    assert (enqueued.status, orjson.loads(enqueued.body)) == (201, {"type": "enqueued",
                                                                    "job_id": "j"})
    result = effect_response(Reply(None, "r", "result", {"result": None}), 1 << 20)
    assert (result.status, orjson.loads(result.body)) == (200, {"type": "result",
                                                                "result": None})


def test_response_over_the_limit_is_500_response_too_large():
    response = json_response(200, {"result": "x" * 100}, 50)
    assert error_of(response) == (500, "response_too_large")


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"]),
       segments=st.lists(st.sampled_from(["jobs", "workers", "queues", "claim", "result",
                                          "schedules", "started", "complete", "", "%2F", "x"]),
                         max_size=4),
       query=st.text(max_size=20), body=st.binary(max_size=64))
def test_any_request_gets_a_route_or_a_json_error(method, segments, query, body):
    target = "/" + "/".join(segments) + ("?" + query if query else "")
    result = API.route(HttpRequest(method, target, HOST + bearer(), body))
    if isinstance(result, HttpResponse):
        payload = orjson.loads(result.body)
        assert result.status >= 400 and type(payload["error"]["code"]) is str
    else:
        assert isinstance(result, (ProducerCall, RegisterWorker, WorkerCall))
