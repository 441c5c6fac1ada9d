"""``Task``: names, argument objects, option splitting, static schedule ids."""

import pytest

from tay import Tay
from tay.errors import ValidationError
from tay.sdk.options import TaskConfig
from tay.sdk.task import Task


def capture(invoice_id: str, amount: int = 5, *extra, note=None, **meta):
    return invoice_id, amount, extra, note, meta


def test_default_name_is_module_dot_function_name():
    tay = Tay(socket_path="/tmp/x.sock")
    assert tay.task(capture).name == f"{__name__}.capture"
    assert tay.task(capture).__name__ == "capture" and tay.task(capture).__wrapped__ is capture


def test_arguments_bind_defaults_and_round_trip_through_call_with():
    task = Task(None, capture, name="c", config=TaskConfig())
    arguments = task.arguments(("inv-1", 7, "x"), {"note": None, "k": 1})
    assert arguments == {"invoice_id": "inv-1", "amount": 7, "extra": ["x"], "note": None, "meta": {"k": 1}}
    assert task.call_with(arguments) == ("inv-1", 7, ("x",), None, {"k": 1})
    assert task("a") == ("a", 5, (), None, {})  # a local call sends nothing
    with pytest.raises(ValidationError, match="invalid arguments for task 'c'"):
        task.arguments((), {})


def test_option_keywords_move_to_options_unless_they_are_parameters():
    def job(queue: str):
        return queue

    task = Task(None, job, name="j", config=TaskConfig(retries=2))
    kwargs, options = task._split_options({"queue": "q", "delay": 3, "options": {"timeout": 1}})
    assert kwargs == {"queue": "q"} and options == {"timeout": 1, "delay": 3}


def test_enqueue_merges_task_config_options():
    sent = {}

    class Producer:
        async def enqueue(self, task, args=None, *, options=None):
            sent.update(task=task, args=args, options=options)

    import asyncio

    task = Task(Producer(), capture, name="c", config=TaskConfig(retries=3, durability="volatile"))
    asyncio.run(task.enqueue("inv", submission_id="s"))
    assert sent["options"] == {"retries": 3, "durability": "volatile", "submission_id": "s"}
    assert sent["args"]["invoice_id"] == "inv"


def test_static_declaration_id_matches_tay_client_derivation():
    tay = Tay(socket_path="/tmp/x.sock")
    task = tay.task(name="tests.periodic", every={"seconds": 30})(lambda: None)
    assert task.static_schedule_declaration()["declaration_id"] == "python:tests.periodic:109c67d531508903d4cb74fb"
    explicit = tay.task(name="other", cron="0 * * * *", declaration_id="hourly")(lambda: None)
    assert explicit.static_schedule_declaration()["declaration_id"] == "hourly"


@pytest.mark.parametrize("options", [{"retries": -1}, {"backoff": "linear"}, {"durability": "disk"},
                                     {"cron": "* * * * *", "every": {"seconds": 1}}, {"every": {"weeks": 1}},
                                     {"every": {"seconds": 0}}, {"overlap": "never"}, {"cron": " "}])
def test_task_options_are_validated_at_declaration(options):
    with pytest.raises(ValidationError):
        Tay(socket_path="/tmp/x.sock").task(**options)
