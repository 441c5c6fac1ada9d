"""RequestDeadlines: one timer per connection keeps every forwarded request's deadline,
answers settle per ``request_id`` first-in first-out, only pending requests expire."""

from __future__ import annotations

from tay.server.uds.deadlines import RequestDeadlines


class FakeLoop:
    """``time`` and ``call_at`` under the test's control; counts armed timers."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[list] = []  # [when, callback, cancelled]

    def time(self) -> float:
        return self.now

    def call_at(self, when, callback):
        timer = [when, callback, False]
        self.timers.append(timer)

        class Handle:
            def cancel(self_inner) -> None:
                timer[2] = True
        return Handle()

    def run_until(self, when: float) -> None:
        self.now = when
        while True:
            due = [t for t in self.timers if not t[2] and t[0] <= when]
            if not due:
                return
            for timer in due:
                timer[2] = True
                timer[1]()


def make(timeout: float = 10.0):
    loop, expired = FakeLoop(), []
    return loop, RequestDeadlines(loop, timeout, expired.append), expired


def test_answered_requests_never_expire_and_one_timer_serves_many():
    loop, deadlines, expired = make()
    for index in range(100):
        loop.now = index * 0.01
        deadlines.add(f"r{index}")
        assert deadlines.answer(f"r{index}")
    assert len(loop.timers) == 1  # armed once, for the first request
    loop.run_until(100.0)
    assert expired == [] and len(deadlines) == 0


def test_only_pending_requests_expire_in_arrival_order():
    loop, deadlines, expired = make()
    deadlines.add("a")
    loop.now = 1.0
    deadlines.add("b")
    loop.now = 2.0
    deadlines.add("c")
    assert deadlines.answer("b")
    loop.run_until(10.5)
    assert expired == ["a"]
    loop.run_until(12.5)
    assert expired == ["a", "c"]
    assert not deadlines.answer("a") and not deadlines.answer("c")  # already settled


def test_one_request_id_is_settled_first_in_first_out():
    loop, deadlines, expired = make()
    deadlines.add("same")
    loop.now = 5.0
    deadlines.add("same")
    assert deadlines.answer("same")  # settles the older one
    loop.run_until(10.0)
    assert expired == []  # the older one was answered; the newer is not due
    loop.run_until(15.0)
    assert expired == ["same"] and len(deadlines) == 0


def test_close_forgets_everything_and_stops_the_timer():
    loop, deadlines, expired = make()
    deadlines.add("x")
    deadlines.close()
    loop.run_until(100.0)
    assert expired == [] and not deadlines.answer("x")


def test_a_reused_id_keeps_its_order_through_one_two_and_three_pending():
    loop, deadlines, expired = make(timeout=10.0)
    for when in (0.0, 1.0, 2.0):
        loop.now = when
        deadlines.add("same")
    assert deadlines.answer("same")  # settles the one added at 0
    loop.now = 3.0
    deadlines.add("same")  # pending: 1, 2, 3
    assert deadlines.answer("same") and deadlines.answer("same")  # 1 and 2
    loop.run_until(12.5)
    assert expired == []  # the one left was added at 3
    loop.run_until(13.0)
    assert expired == ["same"] and len(deadlines) == 0
    assert not deadlines.answer("same")
