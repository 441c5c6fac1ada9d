"""``tay serve`` start-up refusals: one sentence naming what, where and the fix; no
traceback; nothing created (store, socket file, port) when a check fails."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tay.cli import main
from tay.failures import RecoveryRefused
from tay.server.preflight import StartupRefused, check_socket_free, explain
from tay.server.uds.socket_path import SocketPlan
from tay.storage.journal.writer import init_store
from tests.scratch import scratch_dir


@pytest.fixture
def root():
    return scratch_dir("preflight-")


@pytest.fixture
def socket_path():
    with tempfile.TemporaryDirectory(prefix="tpf-") as directory:
        yield f"{directory}/tay.sock"


def serve(capsys, *args: str) -> tuple[int, str]:
    code = main(["serve", *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip()


def test_a_volatile_path_names_the_prefix_and_the_way_out(capsys, socket_path):
    code, err = serve(capsys, "--data-dir", "/tmp/tay-preflight-never", "--init-if-missing",
                      "--validated-filesystem", "--socket", socket_path)
    assert code == 2
    assert "/tmp/tay-preflight-never is under /tmp" in err
    assert "--durability write" in err and "~/.local/share/tay/data" in err
    assert not Path("/tmp/tay-preflight-never").exists() and not Path(socket_path).exists()


def test_strict_sync_without_the_attestation_names_both_flags(capsys, root, socket_path):
    code, err = serve(capsys, "--data-dir", str(root / "data"), "--init-if-missing", "--socket", socket_path)
    assert code == 2
    assert "--validated-filesystem" in err and "--durability write" in err and str(root / "data") in err
    assert not (root / "data").exists()


def test_a_file_as_data_dir_is_not_a_missing_root(capsys, root, socket_path):
    (root / "file").write_text("x")
    code, err = serve(capsys, "--data-dir", str(root / "file"), "--durability", "write", "--socket", socket_path)
    assert code == 2 and f"--data-dir {root / 'file'} is not a directory" in err


def test_a_foreign_directory_is_refused_by_name_and_left_alone(capsys, root, socket_path):
    (root / "photos").mkdir()
    (root / "photos" / "cat.jpg").write_text("x")
    code, err = serve(capsys, "--data-dir", str(root / "photos"), "--init-if-missing",
                      "--durability", "write", "--socket", socket_path)
    assert code == 2 and "is not empty and holds no tay store (it contains cat.jpg)" in err
    assert sorted(p.name for p in (root / "photos").iterdir()) == ["cat.jpg"]


def test_a_missing_store_without_init_names_init_if_missing(capsys, root, socket_path):
    code, err = serve(capsys, "--data-dir", str(root / "none"), "--durability", "write", "--socket", socket_path)
    assert code == 2 and "there is no store in" in err and "--init-if-missing" in err
    assert not (root / "none").exists()


def test_a_busy_store_names_the_owner_pid(capsys, root, socket_path):
    data = root / "data"
    init_store(str(data), "write")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(data / '.tay-owner.lock')!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        code, err = serve(capsys, "--data-dir", str(data), "--durability", "write", "--socket", socket_path)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert f"already in use by PID {holder.pid}" in err and f"kill {holder.pid}" in err
    assert "ownership_busy" in err and not Path(socket_path).exists()


def test_a_taken_http_port_is_refused_before_the_store_exists(capsys, root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = serve(capsys, "--data-dir", str(root / "data"), "--init-if-missing",
                          "--durability", "write", "--http-port", str(port))
    assert code == 2
    assert f"127.0.0.1:{port} is already in use" in err and "--http-port" in err
    assert not (root / "data").exists()


def test_a_live_default_socket_hints_at_the_shared_default(socket_path):
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(socket_path)
        live.listen()
        with pytest.raises(StartupRefused, match="the default socket .* --socket PATH .*TAY_SOCKET_PATH"):
            check_socket_free(SocketPlan(socket_path, automatic=True))
        with pytest.raises(StartupRefused, match="another process already listens"):
            check_socket_free(SocketPlan(socket_path))
    check_socket_free(SocketPlan(socket_path))  # a stale socket file is no refusal


def test_an_unknown_refusal_points_at_inspect_and_keeps_the_code():
    failure = RecoveryRefused("physical_corruption", "record_checksum", path="/d/segments/x", offset=44)
    sentence = explain(failure, "/d")
    assert "left unchanged" in sentence and "tay storage inspect --data-dir /d" in sentence
    assert sentence.endswith("[physical_corruption: record_checksum (path /d/segments/x, offset 44)]")
