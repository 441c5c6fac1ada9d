"""End-to-end job lifecycles through Engine.handle/tick."""

from tay.engine import CancelExecution
from tay.engine import commands as c
from tests.engine.conftest import executes, refusal, reply


def test_enqueue_then_register_dispatches_and_success_records_result(driver):
    job_id = driver.job_id(submission_id="a")
    assert job_id == "9b120abf30861b8423b982580ee5216b"
    out = driver.worker()
    (execute,) = executes(out)
    assert execute.job_id == job_id and execute.message()["request_id"] == execute.execution_id
    assert len(execute.reservation_id) == 24 and len(execute.execution_id) == 24
    assert [event.name for _, event in out.events] == ["job_started"]
    out = driver.succeed(execute, {"sum": 7})
    assert [event.name for _, event in out.events] == ["result_recorded", "job_finished"]
    assert reply(out).type == "accepted"
    assert reply(driver.run(c.Result("p", "x", job_id))).fields == {"result": {"sum": 7}}
    assert driver.status(job_id)["state"] == "completed"


def test_null_result_is_a_real_result(driver):
    driver.worker()
    out = driver.enqueue()
    (execute,) = executes(out)
    driver.succeed(execute, None)
    job_id = execute.job_id
    assert reply(driver.run(c.Result("p", "x", job_id))).fields == {"result": None}


def test_failure_with_retries_becomes_retryable_then_runs_attempt_two(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue(retries=1))
    out = driver.fail(execute)
    (_, failure), (_, finished) = out.events  # the details first, then the finish
    assert finished["disposition"] == 1 and finished["next_attempt"] == 2
    assert failure.name == "failure_recorded" and failure["job_id"] == finished["job_id"]
    assert driver.now + 1000 <= finished["next_due_at"] <= driver.now + 1250
    job = driver.status(execute.job_id)
    assert job["state"] == "retryable" and job["errors"] == [{"code": 1, "version": 1}]
    driver.advance(999)
    assert not executes(driver.tick()) or finished["next_due_at"] <= driver.now
    driver.advance(1250)
    out = driver.tick()
    assert [event.name for _, event in out.events] == ["job_available", "job_started"]
    (second,) = executes(out)
    assert driver.status(execute.job_id)["attempt"] == 2
    out = driver.fail(second)
    assert out.events[1][1]["disposition"] == 2
    assert refusal(driver.run(c.Result("p", "x", execute.job_id)))["code"] == "task_failed"


def test_timeout_cancels_execution_and_consumes_attempt(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue(timeout_ms=100))
    driver.advance(99)
    assert not driver.tick().events
    driver.advance(1)
    out = driver.tick()
    assert any(isinstance(e, CancelExecution) and e.execution_id == execute.execution_id
               for e in out.effects)
    (_, finished), = out.events
    assert finished["outcome"] == 2 and finished["diagnostic"] == {"code": 5, "version": 1}
    assert finished["disposition"] == 2  # retries 0: the only attempt is used up
    # The late report is accepted, not an error (the SDK treats errors as fatal).
    assert reply(driver.succeed(execute, 1)).type == "accepted"


def test_disconnect_interrupts_without_consuming_attempt(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    out = driver.run(c.Disconnect("w1"))
    (_, finished), = out.events
    assert finished["outcome"] == 3 and finished["next_attempt"] == 1
    assert finished["diagnostic"] == {"code": 7, "version": 1}
    assert driver.status(execute.job_id)["state"] == "retryable"


def test_cancel_executing_job_is_durable_then_cancels_execution(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    out = driver.run(c.Cancel("p", "x", execute.job_id))
    assert [event.name for _, event in out.events] == ["job_cancelled"]
    assert out.events[0][1]["execution_token"] is not None
    assert any(isinstance(e, CancelExecution) for e in out.effects)
    assert reply(driver.fail(execute)).type == "accepted"
    again = driver.run(c.Cancel("p", "y", execute.job_id))
    assert not again.events and reply(again).fields["status"] == "cancelled"
    assert refusal(driver.run(c.Result("p", "z", execute.job_id)))["code"] == "task_cancelled"


def test_cancel_completed_job_is_rejected(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute, 1)
    assert refusal(driver.run(c.Cancel("p", "x", execute.job_id)))["code"] == "cancel_rejected"


def test_unknown_execution_pair_is_refused(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    wrong = c.Succeeded("w1", "x", execute.reservation_id, "nope", 1)
    assert refusal(driver.run(wrong))["code"] == "unknown_execution"
    driver.worker(conn="w2")
    other_conn = c.Succeeded("w2", "y", execute.reservation_id, execute.execution_id, 1)
    assert refusal(driver.run(other_conn))["code"] == "unknown_execution"
