import asyncio
import os
import tempfile

import pytest

from .peer import Peer


@pytest.fixture
def socket_dir():
    # Short paths: a Unix socket path is limited to ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="tsdk-", dir="/tmp") as directory:
        yield directory


@pytest.fixture
def run():
    """Run a coroutine on a fresh event loop (the SDK binds one loop per instance)."""
    def runner(coroutine, timeout=10.0):
        return asyncio.run(asyncio.wait_for(coroutine, timeout))
    return runner


@pytest.fixture
def peer_path(socket_dir):
    return os.path.join(socket_dir, "peer.sock")


__all__ = ["Peer"]


@pytest.fixture
def tay_server():
    """A running ``tay serve``."""
    from .server import Server, scratch_dirs

    data, sockets = scratch_dirs()
    with data, sockets:
        server = Server(os.path.join(data.name, "data"), os.path.join(sockets.name, "tay.sock")).start()
        try:
            yield server
        finally:
            server.stop()
