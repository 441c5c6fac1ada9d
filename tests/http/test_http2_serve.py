"""HTTP/2 against a real ``tay serve`` (uvloop, the CLI's TLS setup) with curl and
``httpx[http2]``: prior-knowledge h2c on loopback, ALPN h2 over mTLS, and the HTTP/1.1
answer to an h2c upgrade offer."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

import httpx
import pytest

from tests.conformance.harness import Server

from .certs import scratch_pki
from .conftest import SCRATCH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]
CURL = shutil.which("curl")
JOB = '{"task":"demo.add","args":{"n":1}}'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    assert CURL is not None, "curl is needed (make test installs it)"
    return subprocess.run([CURL, "-sS", "-i", "--max-time", "10", *args], capture_output=True,
                          text=True, timeout=30)


@pytest.fixture(scope="module")
def plain():
    port = free_port()
    server = Server("--http-port", str(port)).start()
    server.url = f"http://127.0.0.1:{port}"
    yield server
    server.close()


@pytest.fixture(scope="module")
def tls():
    with scratch_pki(SCRATCH) as pki:
        port = free_port()
        server = Server("--http-port", str(port), "--http-tls-certfile", pki["server_cert"],
                        "--http-tls-keyfile", pki["server_key"],
                        "--http-tls-cacertfile", pki["ca"]).start()
        server.url, server.pki = f"https://127.0.0.1:{port}", pki
        yield server
        server.close()


def test_curl_prior_knowledge_h2c(plain: Server) -> None:
    done = curl("--http2-prior-knowledge", "-H", "content-type: application/json",
                "-d", JOB, f"{plain.url}/jobs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("HTTP/2 201"), done.stdout
    job_id = json.loads(done.stdout.split("\n\n", 1)[1])["job_id"]
    status = curl("--http2-prior-knowledge", f"{plain.url}/jobs/{job_id}")
    assert status.stdout.startswith("HTTP/2 200") and '"status":"available"' in status.stdout


def test_an_h2c_upgrade_offer_is_answered_in_http_1_1(plain: Server) -> None:
    done = curl("--http2", f"{plain.url}/nope")  # offers Upgrade: h2c, which is not taken
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("HTTP/1.1 404"), done.stdout


def test_httpx_h2c(plain: Server) -> None:
    with httpx.Client(http1=False, http2=True, base_url=plain.url) as client:
        created = client.post("/jobs", json={"task": "demo.add", "args": {}})
        assert (created.http_version, created.status_code) == ("HTTP/2", 201)
        assert client.get("/healthz").status_code == 200  # every route, same router


def test_curl_alpn_h2_with_a_client_certificate(tls: Server) -> None:
    pki = tls.pki
    done = curl("--http2", "--cacert", pki["ca"], "--cert", pki["client_cert"], "--key",
                pki["client_key"], "-H", "content-type: application/json", "-d", JOB,
                f"{tls.url}/jobs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("HTTP/2 201"), done.stdout
    refused = curl("--http2", "--cacert", pki["ca"], f"{tls.url}/nope")
    assert refused.returncode != 0 and "HTTP/" not in refused.stdout  # no certificate


def test_httpx_alpn_h2_with_a_client_certificate(tls: Server) -> None:
    import ssl

    context = ssl.create_default_context(cafile=tls.pki["ca"])
    context.load_cert_chain(tls.pki["client_cert"], tls.pki["client_key"])
    with httpx.Client(http2=True, verify=context, base_url=tls.url) as client:
        created = client.post("/jobs", json={"task": "demo.add", "args": {}})
        assert (created.http_version, created.status_code) == ("HTTP/2", 201)
        job_id = created.json()["job_id"]
        assert client.get(f"/jobs/{job_id}").json()["status"] == "available"
