"""The test harnesses never leave a ``tay serve`` running when it did not come up in time
(a slow start on a loaded machine used to leave the process behind the failed test)."""

from __future__ import annotations

import pytest

from tests.conformance.harness import Server
from tests.crash.cluster import SCRATCH, ServerProcess
from tests.scratch import scratch_dir
from tests.sdk.server import Server as SdkServer


def test_the_conformance_server_is_killed_when_it_does_not_come_up_in_time():
    server = Server("--http-port", "0")
    try:
        with pytest.raises(RuntimeError, match="did not start|did not open"):
            server.start(timeout=0)
        assert server.process is not None and server.process.poll() is not None
    finally:
        server.close()


def test_the_crash_harness_server_is_killed_when_it_does_not_come_up_in_time():
    SCRATCH.mkdir(exist_ok=True)
    root = scratch_dir("late-")
    server = ServerProcess(root / "data", str(root / "tay.sock"), root / "serve.log")
    with pytest.raises(RuntimeError, match="did not start"):
        server.start(timeout=0)
    assert server.process is not None and server.process.poll() is not None


def test_the_sdk_harness_server_is_killed_when_it_does_not_come_up_in_time():
    root = scratch_dir("late-sdk-")
    server = SdkServer(str(root / "data"), str(root / "tay.sock"))
    with pytest.raises(RuntimeError, match="did not start"):
        server.start(timeout=0)
    assert server.process is not None and server.process.poll() is not None
