"""How a connection's peer is named in the operator's log (tay.server.peers)."""

from __future__ import annotations

import os
import socket

from tay.server.peers import tcp_peer, unix_peer


class Transport:
    def __init__(self, **extra) -> None:
        self.extra = extra

    def get_extra_info(self, name, default=None):
        return self.extra.get(name, default)


class Tls:
    def __init__(self, certificate) -> None:
        self.certificate = certificate

    def getpeercert(self):
        return self.certificate


def test_tcp_peers_by_address_and_client_certificate():
    assert tcp_peer(Transport(peername=("10.0.0.5", 5301))) == "10.0.0.5:5301"
    assert tcp_peer(Transport(peername=("::1", 5302, 0, 0))) == "[::1]:5302"
    subject = ((("countryName", "DE"),), (("commonName", "ops-runner"),))
    assert tcp_peer(Transport(peername=("10.0.0.5", 5303), ssl_object=Tls(
        {"subject": subject}))) == "10.0.0.5:5303 CN=ops-runner"
    assert tcp_peer(Transport(peername=("10.0.0.5", 5304), ssl_object=Tls({}))) == \
        "10.0.0.5:5304"
    assert tcp_peer(Transport()) == tcp_peer(None) == "unknown"


def test_unix_peers_by_pid_and_uid():
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert unix_peer(Transport(socket=left)) == f"pid {os.getpid()} uid {os.getuid()}"
    assert unix_peer(Transport()) == unix_peer(None) == "unix"
