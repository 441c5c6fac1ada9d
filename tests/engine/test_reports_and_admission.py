"""Execution reports (results, failure objects, pairing) and admission budgets."""

import gc
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.admission import ClientPermits, job_charge
from tay.failures import ConfigurationError, RequestRefused
from tay.storage.v2.epoch_records import encode_epoch_event
from tay.storage.formats.record import MAX_PAYLOAD
from tests.engine.conftest import Driver, executes, refusal, reply


def running(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    return execute


def test_result_too_large_is_refused_and_execution_stays_live():
    driver = Driver(EngineConfig(result_bytes=10))
    execute = running(driver)
    assert refusal(driver.succeed(execute, "x" * 20))["code"] == "result_too_large"
    assert reply(driver.succeed(execute, "ok")).type == "accepted"


def test_a_result_whose_value_passes_one_record_is_refused_not_written():
    """A result limit over ~3.7 MB admits JSON whose Value passes a record's 16 MiB
    payload (9 Value bytes per 2 JSON bytes for ``[0,0,...]``): refused at report time,
    nothing written, the execution stays live; the same size as text fits."""
    driver = Driver(EngineConfig(result_bytes=4_000_000))
    execute = running(driver)
    worst = [0] * 1_870_000  # 3.74 MB of JSON, 16.8 MB of Value
    wire = refusal(driver.succeed(execute, worst))
    assert wire["code"] == "result_too_large" and wire["limit"] == MAX_PAYLOAD - 105
    assert "one journal record" in wire["message"]
    out = driver.succeed(execute, "x" * 3_900_000)
    assert reply(out).type == "accepted"
    assert out.events[0][1].name == "result_recorded"
    assert len(carried(out.events[0][1])) <= MAX_PAYLOAD


def test_an_error_whose_value_passes_one_record_is_refused_not_written():
    driver = Driver(EngineConfig(error_bytes=MAX_PAYLOAD))
    execute = running(driver)
    wire = refusal(driver.fail(execute, {"message": "m" * (MAX_PAYLOAD - 66)}))
    assert wire["code"] == "error_too_large" and wire["limit"] == MAX_PAYLOAD - 104
    out = driver.fail(execute, {"message": "m" * (MAX_PAYLOAD - 104 - 22)})  # exactly fits
    assert reply(out).type == "accepted"
    [failure] = [event for _, event in out.events if event.name == "failure_recorded"]
    assert len(carried(failure)) == MAX_PAYLOAD


def carried(event) -> bytes:
    """The payload of ``event`` inside a Store-v2 epoch (a (30,2) record, the larger)."""
    return encode_epoch_event(event, event.payload.get("expected_revision", 0) + 1)


@pytest.mark.parametrize("error,code", [
    ("boom", "invalid_failure"), ({}, "invalid_failure"), ({"other": 1}, "invalid_failure"),
    ({"type": 5}, "invalid_failure"), ({"type": "x" * 129}, "invalid_failure"),
    ({"message": "m" * 8193}, "invalid_failure"),
    ({"message": "m" * 5000, "traceback": "t" * 5000}, "error_too_large"),
])
def test_failure_object_rules(driver, error, code):
    execute = running(driver)
    assert refusal(driver.run(c.Failed("w1", "f", execute.reservation_id,
                                       execute.execution_id, error)))["code"] == code


def test_failure_ignores_extra_keys(driver):
    execute = running(driver)
    out = driver.fail(execute, {"type": "CancelledError", "cancelled": True})
    assert reply(out).type == "accepted" and out.events


def test_first_completion_wins_and_duplicate_is_accepted(driver):
    execute = running(driver)
    driver.succeed(execute, 1)
    out = driver.fail(execute)
    assert not out.events and reply(out).type == "accepted"


def test_invalid_execution_ids_are_refused(driver):
    running(driver)
    assert refusal(driver.run(c.Started("w1", "s", "", "x")))["code"] == "invalid_execution"


def test_reports_on_unknown_connection_are_unknown_execution(driver):
    execute = running(driver)
    assert refusal(driver.succeed(execute, 1, conn="ghost"))["code"] == "unknown_execution"


def test_state_budget_refuses_new_jobs_with_retained_bytes():
    error = refusal(Driver(EngineConfig(max_state_bytes=0)).enqueue())
    assert (error["code"], error["reason"]) == ("capacity", "retained_bytes")


def test_state_budget_charges_definition_nodes_and_results():
    driver = Driver()
    execute = running(driver)
    entry = driver.engine.jobs[bytes.fromhex(execute.job_id)]
    base = job_charge(len(entry.state.definition_bytes), 25)  # 24 fixed + empty args
    assert entry.charge == base
    driver.succeed(execute, "abc")
    assert entry.charge == base + 8 and driver.engine.budget.used == base + 8


def test_client_permits_refuse_oversized_requests_and_exhaustion():
    permits = ClientPermits(EngineConfig(client_slots=2, client_bytes=2048))
    with pytest.raises(RequestRefused) as too_big:
        permits.acquire(1025)
    assert too_big.value.details["reason"] == "client_bytes"
    permits.acquire(1024)
    permits.acquire(1)
    with pytest.raises(RequestRefused) as full:
        permits.acquire(1)
    assert full.value.details["reason"] == "client_slots"
    permits.release()
    permits.acquire(1)


@pytest.mark.parametrize("option,value", [("client_slots", 0), ("max_state_bytes", -1),
                                          ("default_timeout_ms", 86_400_001), ("queues", {"q": 0}),
                                          ("result_bytes", True)])
def test_bad_config_names_the_option(option, value):
    with pytest.raises(ConfigurationError) as bad:
        EngineConfig(**{option: value})
    assert bad.value.option.startswith(option)


@pytest.mark.parametrize("mode,capacity", [("client", 1), ("worker", 0), ("embedded", 65_536),
                                           ("robot", 1), ("worker", True)])
def test_bad_hello_is_refused(driver, mode, capacity):
    assert refusal(driver.run(c.Connect("x", mode, "rt", capacity, None, "h")))["code"] == "invalid_hello"


def test_second_hello_and_client_registration_are_refused(driver):
    driver.run(c.Connect("x", "client", "rt", 0, None, "h"))
    assert refusal(driver.run(c.Connect("x", "client", "rt", 0, None, "h2")))["code"] == "already_hello"
    assert refusal(driver.run(c.RegisterTasks("x", ("t",), "r")))["code"] == "client_cannot_execute"
    assert refusal(driver.run(c.RegisterTasks("nobody", ("t",), "r")))["code"] == "hello_required"


@pytest.mark.parametrize("tasks", [("t", "t"), ("",), ("a\x00",), "t", tuple(f"t{i}" for i in range(257))])
def test_bad_task_lists_are_refused(driver, tasks):
    driver.run(c.Connect("x", "worker", "rt", 1, None, "h"))
    assert refusal(driver.run(c.RegisterTasks("x", tasks, "r")))["code"] == "invalid_tasks"


def test_status_and_result_of_unknown_or_malformed_ids(driver):
    assert refusal(driver.run(c.Status("p", "s", "0" * 31 + "1")))["code"] == "not_found"
    assert refusal(driver.run(c.Status("p", "s", "XYZ")))["code"] == "invalid_job_id"
    assert refusal(driver.run(c.Result("p", "s", "0" * 32)))["code"] == "invalid_job_id"


def test_result_of_pending_job_is_not_ready(driver):
    job_id = driver.job_id()
    assert refusal(driver.run(c.Result("p", "r", job_id)))["code"] == "result_not_ready"


def test_a_late_report_is_recognised_for_the_latest_settled_memory_executions():
    driver = Driver(EngineConfig(settled_memory=3))
    driver.worker()
    done = []
    for _ in range(5):
        (execute,) = executes(driver.enqueue())
        driver.succeed(execute)
        done.append(execute)
    driver.succeed(done[4])  # a duplicate settles nothing new: the order stays
    for execute, remembered in zip(done, [False, False, True, True, True]):
        out = driver.succeed(execute)
        if remembered:
            assert reply(out).type == "accepted" and not out.events
        else:
            assert refusal(out)["code"] == "unknown_execution"


def test_a_late_report_is_recognised_only_on_the_connection_that_ran_it():
    driver = Driver(EngineConfig(settled_memory=8))
    driver.worker("w1")
    driver.worker("w2")
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute)
    other = "w2" if execute.conn == "w1" else "w1"
    assert reply(driver.succeed(execute)).type == "accepted"
    assert refusal(driver.succeed(execute, conn=other))["code"] == "unknown_execution"
    swapped = c.Succeeded(execute.conn, driver.rid(), execute.execution_id,
                          execute.reservation_id, None)
    assert refusal(driver.run(swapped))["code"] == "unknown_execution"


class _Conn:
    """A connection handle as the server's: an object, compared by identity."""


def test_the_settled_memory_keeps_no_closed_connection_alive():
    driver = Driver(EngineConfig(settled_memory=8))
    conn = _Conn()
    driver.worker(conn)
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute)
    assert reply(driver.succeed(execute)).type == "accepted"
    gone = weakref.ref(conn)
    driver.run(c.Disconnect(conn))
    del conn, execute
    gc.collect()
    assert gone() is None


def test_a_connection_handle_said_hello_again_after_a_disconnect_starts_afresh():
    """Its reports from before the disconnect name executions it no longer holds."""
    driver = Driver(EngineConfig(settled_memory=8))
    driver.worker("w1")
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute)
    driver.run(c.Disconnect("w1"))
    driver.worker("w1")
    assert refusal(driver.succeed(execute))["code"] == "unknown_execution"


@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 40)), max_size=50))
def test_a_run_of_jobs_is_charged_what_its_jobs_are_charged_one_by_one(jobs) -> None:
    """``jobs_charge`` (a columnar run's charge from its sums) equals the sum of
    ``job_charge`` per job, for any run."""
    from tay.engine.admission import jobs_charge

    assert jobs_charge(sum(d for d, _ in jobs), sum(n for _, n in jobs), len(jobs)) == \
        sum(job_charge(d, n) for d, n in jobs)
