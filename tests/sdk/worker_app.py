"""A worker module for the ``tay-worker`` end-to-end test (socket from TAY_SOCKET_PATH)."""

import time

from tay import Tay

tay = Tay(mode="worker", capacity=2)


@tay.task(name="e2e.add")
def add(left: int, right: int) -> dict:
    return {"sum": left + right}


@tay.task(name="e2e.slow")
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"
