"""Enqueue option rules (protocol.md §2.3-2.5): keys, units, rounding, bounds, ids, identity."""

import pytest

from tay.engine import EngineConfig
from tay.engine.commands import Enqueue
from tay.engine.validation.ids import job_id_from_submission
from tay.engine.validation.options import round_half_away, seconds_to_ms
from tests.engine.conftest import Driver, refusal, reply

SUBMISSION_VECTORS = {
    "python-interop-submission": "5c7e3bd82fedaf28aaa0ce9a171bb577",
    "standalone-smoke-job": "48975a6f6b4d4bd1b527db1124b9f77c",
    "order-918:capture": "5c9e4b75d3ded34382c9a23f56fbcbd3",
    "capture:inv-42": "d22fbe323f038ebe7761b7c5f19756fd",
    "a": "9b120abf30861b8423b982580ee5216b",
}


@pytest.mark.parametrize("submission_id,expected", SUBMISSION_VECTORS.items())
def test_submission_id_vectors(submission_id, expected):
    assert job_id_from_submission(submission_id).hex() == expected
    assert Driver().job_id(submission_id=submission_id) == expected


def definition(driver, job_id):
    return driver.engine.jobs[bytes.fromhex(job_id)].state.definition


def invalid(options, code="invalid_enqueue", task="t", args=None):
    error = refusal(Driver().enqueue(task=task, args={} if args is None else args, **options))
    assert error["code"] == code, error
    return error


@pytest.mark.parametrize("options", [
    {"priority": 1}, {"bogus": True}, {"id": "0" * 32}, {"id": "ABCDEF" + "0" * 26},
    {"id": "1" * 31}, {"id": "1" * 32, "submission_id": "x"}, {"submission_id": ""},
    {"delay": 1, "delay_ms": 1}, {"delay": 1, "run_at": 5}, {"delay_ms": 1, "run_at": 5},
    {"timeout": 1, "timeout_ms": 1000}, {"timeout": 0}, {"timeout": 0.0004},
    {"timeout": 86_401}, {"timeout_ms": 0}, {"timeout_ms": 86_400_001}, {"timeout_ms": True},
    {"retries": -1}, {"retries": 65_535}, {"retries": True}, {"retries": 1.0},
    {"delay": -1}, {"delay": float("nan")}, {"delay": True}, {"delay_ms": 1.5},
    {"run_at": -1}, {"run_at": 2**63}, {"run_at": False}, {"backoff": "linear"},
    {"queue": ""}, {"queue": 5}, {"queue": "a\x00b"}, {"durability": "disk"},
])
def test_invalid_option_is_refused(options):
    invalid(options)


def test_null_option_values_mean_absent():
    driver = Driver()
    job_id = driver.job_id(delay=None, timeout=None, retries=None, queue=None, id=None)
    d = definition(driver, job_id)
    assert d["scheduled_at"] is None and d["timeout_ms"] == 30_000 and d["queue_key"] == "default"


def test_null_inside_args_is_valid():
    driver = Driver()
    job_id = driver.job_id(args={"x": None, "y": [None]})
    assert definition(driver, job_id)["args"] == {"x": None, "y": [None]}


@pytest.mark.parametrize("args", [[1], "x", 3])
def test_args_must_be_an_object(args):
    error = refusal(Driver().run(Enqueue("p", "r", "t", args, {})))
    assert error["code"] == "invalid_enqueue" and error["option"] == "args"


@pytest.mark.parametrize("seconds,ms", [(0.0005, 1), (0.0015, 2), (0.0025, 3), (1.0004, 1000),
                                        (2, 2000), (0.5, 500), (0, 0)])
def test_seconds_round_half_away_from_zero(seconds, ms):
    assert seconds_to_ms(seconds, "delay") == ms


def test_round_half_away_is_not_bankers_rounding():
    assert round_half_away(2.5) == 3 and round(2.5) == 2
    assert round_half_away(0.49999999999999994) == 0


def test_float_timeout_is_rounded_and_delay_schedules_job():
    driver = Driver()
    job_id = driver.job_id(timeout=1.0005, delay=2.5)
    d = definition(driver, job_id)
    assert d["timeout_ms"] == 1001 and d["scheduled_at"] == driver.now + 2500
    assert driver.status(job_id)["state"] == "scheduled"


def test_run_at_in_the_past_is_available_and_retries_set_max_attempts():
    driver = Driver()
    job_id = driver.job_id(run_at=5, retries=3, timeout=86_400)
    job = driver.status(job_id)
    assert job["state"] == "available" and job["max_attempts"] == 4 and job["scheduled_at"] == 5


def test_same_id_same_definition_returns_existing_job_without_event():
    driver = Driver()
    first = driver.enqueue(submission_id="s", run_at=10)
    again = driver.enqueue(submission_id="s", run_at=10)
    assert len(first.events) == 1 and not again.events
    assert reply(again).type == "enqueued"
    assert reply(again).fields["job"] == reply(first).fields["job"]


@pytest.mark.parametrize("change", [{"run_at": 11}, {"retries": 1}, {"queue": "other"},
                                    {"durability": "volatile"}, {"timeout_ms": 5}])
def test_same_id_different_definition_is_a_conflict(change):
    driver = Driver()
    driver.enqueue(submission_id="s", run_at=10)
    error = refusal(driver.enqueue(submission_id="s", **{"run_at": 10, **change}))
    assert error["code"] == "invalid_enqueue" and "conflict" in error["message"]


def test_integer_and_float_args_are_different_definitions():
    driver = Driver()
    driver.enqueue(args={"n": 1}, id="1" * 32)
    assert refusal(driver.enqueue(args={"n": 1.0}, id="1" * 32))["code"] == "invalid_enqueue"


def test_random_ids_have_no_zero_byte_and_differ():
    driver = Driver()
    ids = {driver.job_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(b"\x00" not in bytes.fromhex(job_id) for job_id in ids)


def test_insert_limits_are_capacity_refusals():
    config = EngineConfig(max_args_bytes=100, max_depth=3, max_nodes=20)
    assert refusal(Driver(config).enqueue(args={"x": "y" * 100}))["reason"] == "encoded_bytes"
    assert refusal(Driver(config).enqueue(args={"a": {"b": {"c": 1}}}))["reason"] == "depth"
    assert refusal(Driver(config).enqueue(args={str(i): i for i in range(11)}))["reason"] == "output_nodes"


def test_integer_outside_value_range_is_invalid():
    assert invalid({}, args={"n": 2**64})["field"] == "args.n"


def test_public_job_object_has_real_nulls_and_durability():
    driver = Driver()
    job = reply(driver.enqueue(durability="volatile")).fields["job"]
    assert set(job) == {"id", "task", "args", "state", "attempt", "max_attempts", "queue",
                        "scheduled_at", "completed_at", "errors", "durability"}
    assert job["completed_at"] is None and job["durability"] == "volatile"
    assert job["attempt"] == 0 and job["errors"] == []


def test_live_job_keeps_only_canonical_definition_bytes():
    from tay.engine import Execute
    from tay.storage import events as ev
    from tay.storage.events.definition import LazyDefinition

    driver = Driver()
    args = {"payload": "x" * 64, "n": [1, 2]}
    job_id = driver.job_id(args=args, queue="alpha")
    stored = definition(driver, job_id)
    assert type(stored) is LazyDefinition and stored["args"] == args
    sequence, event = driver.journal[-1]
    assert event["definition"] is stored  # the insert event carries the same object
    assert ev.decode_event(1, 1, ev.encode_event(event))["definition"] == stored
    driver.status(job_id)
    execute = [e for e in driver.worker().effects if isinstance(e, Execute)][0]
    assert execute.args == args
    assert stored._args is not args and not isinstance(stored._args, dict)  # nothing cached
