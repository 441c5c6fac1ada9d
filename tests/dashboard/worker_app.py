"""The worker of the dashboard tests, run as ``tay-worker tests.dashboard.worker_app``
(socket from TAY_SOCKET_PATH). ``ui.flaky`` fails until the file named by its ``gate``
argument exists, so a test can read its traceback, create the file, retry and watch it
complete."""

import os
import time

from tay import Tay

tay = Tay(mode="worker", capacity=4)


@tay.task(name="ui.ok")
def ok(n: int = 0) -> dict:
    return {"n": n, "square": n * n}


@tay.task(name="ui.slow")
def slow(seconds: float = 0.2) -> str:
    time.sleep(seconds)
    return "done"


class PaymentDeclined(Exception):
    pass


@tay.task(name="ui.flaky", retries=0)
def flaky(gate: str, note: str = "") -> str:
    if not os.path.exists(gate):
        raise PaymentDeclined(f"card declined for order {note}")
    return "paid"
