"""Result replies per job state (seeds), effect wire shapes, and volatile accounting."""

import orjson

from tay.engine import CancelExecution
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.events import encode_event
from tests.engine.conftest import Driver, executes, refusal, reply


def test_completed_without_retained_result_is_result_missing():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue())
    driver.succeed(execute, 5)
    fresh = Driver()
    before = None  # a history from before results were recorded: the finish alone
    for sequence, event in driver.journal:
        payload = event.payload
        if event.name == "result_recorded":
            before = payload["expected_revision"]
            continue
        if event.name == "job_finished" and before is not None:  # follows where it was
            event = ev.job_finished(payload["job_id"], payload["at"], before,
                                    execution_token=payload["execution_token"],
                                    outcome=payload["outcome"], diagnostic_code=None,
                                    disposition=payload["disposition"])
        fresh.engine.replay(sequence, event.type, event.schema, encode_event(event))
    assert fresh.status(execute.job_id)["state"] == "completed"
    assert refusal(fresh.run(c.Result("p", "r", execute.job_id)))["code"] == "result_missing"


def test_resubmitting_a_completed_job_returns_it_as_is():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(submission_id="once"))
    driver.succeed(execute, 1)
    out = driver.enqueue(submission_id="once")
    assert not out.events and reply(out).fields["job"]["state"] == "completed"
    assert reply(out).fields["job"]["completed_at"] == driver.now


def test_effect_messages_have_wire_shapes():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(args={"x": 1}, timeout_ms=50))
    # the frame splices the args' JSON (orjson.Fragment); what goes on the wire is this
    assert orjson.loads(orjson.dumps(execute.message())) == {
        "type": "execute", "request_id": execute.execution_id,
        "reservation_id": execute.reservation_id, "execution_id": execute.execution_id,
        "job_id": execute.job_id, "task": "t", "args": {"x": 1}, "timeout_ms": 50,
    }
    driver.advance(50)
    (cancel,) = [e for e in driver.tick().effects if isinstance(e, CancelExecution)]
    message = cancel.message()
    assert message["type"] == "cancel_execution" and len(message["request_id"]) == 24
    assert message["execution_id"] == execute.execution_id
    refused = driver.run(c.Status("p", "s1", "0" * 31 + "2"))
    assert refused.effects[0].message() == {
        "type": "error", "request_id": "s1",
        "error": {"code": "not_found", "job_id": "0" * 31 + "2",
                  "message": f"job {'0' * 31 + '2'} not found"},
    }


def test_volatile_job_retries_and_completes_without_events():
    driver = Driver()
    driver.worker()
    (execute,) = executes(driver.enqueue(durability="volatile", retries=1))
    driver.fail(execute)
    driver.advance(1250)
    (second,) = executes(driver.tick())
    driver.succeed(second, "done")
    assert driver.journal == []
    assert reply(driver.run(c.Result("p", "r", execute.job_id))).fields["result"] == "done"
    assert driver.status(execute.job_id)["attempt"] == 2
