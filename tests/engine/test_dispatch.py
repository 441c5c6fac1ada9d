"""Dispatch: executor selection, queue credits, round-robin fairness, no head-of-line blocking."""

from tay.engine import EngineConfig
from tay.engine import commands as c
from tests.engine.conftest import Driver, executes, reply


def test_job_without_capable_executor_stays_available_and_does_not_block(driver):
    blocked = driver.job_id(task="nobody")
    driver.enqueue(task="t")
    (execute,) = executes(driver.worker(tasks=("t",)))
    assert execute.task == "t"
    job = driver.status(blocked)
    assert job["state"] == "available" and job["attempt"] == 0


def test_fewest_reservations_wins_then_runtime_id(driver):
    driver.worker(conn="b", runtime_id="rt-b")
    driver.worker(conn="a", runtime_id="rt-a")
    first = executes(driver.enqueue())[0]
    second = executes(driver.enqueue())[0]
    third = executes(driver.enqueue())[0]
    assert (first.conn, second.conn, third.conn) == ("a", "b", "a")


def test_executor_capacity_limits_reservations(driver):
    driver.worker(capacity=1)
    assert len(executes(driver.enqueue())) == 1
    second = driver.enqueue()
    assert executes(second) == []
    (first_execute,) = [e for e in driver.engine.executors.reservations.values()]
    out = driver.run(c.Succeeded("w1", "x", first_execute.reservation_id,
                                 first_execute.execution_id, 1))
    assert len(executes(out)) == 1


def test_queue_credits_bound_executing_jobs():
    driver = Driver(EngineConfig(queues={"q": 2}))
    driver.worker(capacity=10)
    started = [executes(driver.enqueue(queue="q")) for _ in range(4)]
    assert [len(s) for s in started] == [1, 1, 0, 0]
    assert driver.engine.state_counts() == {"executing": 2, "available": 2}


def test_ready_jobs_run_in_eligible_then_insert_order(driver):
    late = driver.job_id(run_at=driver.now - 10)
    early = driver.job_id(run_at=driver.now - 20)
    now = driver.job_id()
    order = [e.job_id for e in executes(driver.worker(capacity=3))]
    assert order == [early, late, now]


def test_round_robin_across_queues():
    driver = Driver(EngineConfig(queues={"a": 10, "b": 10}))
    for _ in range(3):
        driver.enqueue(queue="a")
    for _ in range(3):
        driver.enqueue(queue="b")
    queues = [e.queue for e in executes(driver.worker(capacity=4))]
    assert sorted(queues[:2]) == ["a", "b"] and sorted(queues) == ["a", "a", "b", "b"]


def test_round_robin_across_dispatch_calls():
    # one start per dispatch (capacity 1): the queue served last goes to the back of the
    # rotation, so the next success starts the other queue's job, not its own next one
    driver = Driver(EngineConfig(queues={"a": 10, "b": 10}))
    for _ in range(3):
        driver.enqueue(queue="a")
    for _ in range(3):
        driver.enqueue(queue="b")
    (execute,) = executes(driver.worker(capacity=1))
    queues = [execute.queue]
    for _ in range(5):
        (execute,) = executes(driver.succeed(execute))
        queues.append(execute.queue)
    assert queues == ["a", "b", "a", "b", "a", "b"]


def test_http_session_only_gets_jobs_of_its_queue(driver):
    driver.enqueue(queue="other")
    assert executes(driver.worker(conn="s", queue="mine")) == []
    (execute,) = executes(driver.enqueue(queue="mine"))
    assert execute.conn == "s"


def test_unregister_stops_new_dispatch(driver):
    driver.worker()
    driver.run(c.UnregisterTasks("w1", ("t",), "u"))
    assert executes(driver.enqueue()) == []


def test_disconnect_removes_capacity_and_redispatches_elsewhere(driver):
    driver.worker(conn="w1")
    (execute,) = executes(driver.enqueue())
    driver.worker(conn="w2", capacity=1)
    driver.run(c.Disconnect("w1"))
    job = driver.status(execute.job_id)
    assert job["state"] == "retryable"
    driver.advance(1250)
    (again,) = executes(driver.tick())
    assert again.conn == "w2" and again.job_id == execute.job_id
    assert driver.status(execute.job_id)["attempt"] == 1


def test_scheduled_job_promotes_at_due_time_and_next_wakeup(driver):
    job_id = driver.job_id(delay_ms=500)
    driver.worker()
    assert driver.engine.next_wakeup() == driver.mono + 500
    driver.advance(499)
    assert not driver.tick().events
    driver.advance(1)
    out = driver.tick()
    assert [event.name for _, event in out.events] == ["job_available", "job_started"]
    assert out.events[0][1]["due_at"] == driver.now
    assert executes(out)[0].job_id == job_id
    assert driver.engine.next_wakeup() == driver.mono + 30_000


def test_timeout_starts_at_dispatch_not_enqueue(driver):
    job_id = driver.job_id(timeout_ms=1000)
    driver.advance(5000)
    (execute,) = executes(driver.worker())
    driver.advance(999)
    assert not driver.tick().events
    assert driver.status(job_id)["state"] == "executing"


def test_cancel_scheduled_job_removes_it_from_timers(driver):
    job_id = driver.job_id(delay_ms=100)
    out = driver.run(c.Cancel("p", "x", job_id))
    assert out.events[0][1]["execution_token"] is None
    driver.advance(200)
    assert not driver.tick().events
    assert driver.engine.next_wakeup() is None


def test_started_is_informational_and_accepted(driver):
    driver.worker()
    (execute,) = executes(driver.enqueue())
    out = driver.run(c.Started("w1", "s", execute.reservation_id, execute.execution_id))
    assert not out.events and reply(out).type == "accepted"
    assert driver.status(execute.job_id)["state"] == "executing"
