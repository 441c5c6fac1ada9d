"""An explicit socket path is refused when another local user could replace the socket: its
directory (or one above it) belongs to someone else, or is group/world-writable without the
sticky bit. Refused before anything is created, with a sentence naming the path and the fix.
Also: the socket path appears only once it accepts connections."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tay.failures import ConfigurationError
from tay.server.uds.socket_path import SocketPlan, bind_unix_socket, socket_directory_problem

REPO = Path(__file__).resolve().parents[2]
STRANGER = 4242  # a uid that is neither this user nor root

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to "
                                                       "another user (CI runs as root)")


def refusal(path: Path) -> str:
    with pytest.raises(ConfigurationError) as info:
        bind_unix_socket(SocketPlan(str(path)))
    assert not path.exists()
    return info.value.message


@as_root
def test_a_directory_of_another_user_is_refused(tmp_path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    os.chown(foreign, STRANGER, STRANGER)
    message = refusal(foreign / "tay.sock")
    assert f"{foreign} belongs to uid {STRANGER}" in message
    assert "--socket PATH in a directory owned by" in message
    # deeper: a directory of ours inside theirs is no safer (they can rename it away)
    inner = foreign / "ours"
    inner.mkdir(mode=0o700)
    assert f"{foreign} belongs to uid {STRANGER}" in refusal(inner / "tay.sock")
    # a missing parent under theirs is refused before it would be created
    assert f"{foreign} belongs" in refusal(foreign / "new" / "tay.sock")
    assert not (foreign / "new").exists()


@as_root
def test_a_symlink_through_another_users_directory_is_refused(tmp_path) -> None:
    ours, foreign = tmp_path / "ours", tmp_path / "foreign"
    ours.mkdir(mode=0o700)
    foreign.mkdir(mode=0o755)
    (foreign / "link").symlink_to(ours)
    os.chown(foreign, STRANGER, STRANGER)
    assert f"{foreign} belongs to uid {STRANGER}" in refusal(foreign / "link" / "tay.sock")
    # and a link of ours that resolves into their directory
    os.chown(foreign, 0, 0)
    target = foreign / "dir"
    target.mkdir(mode=0o700)
    os.chown(foreign, STRANGER, STRANGER)
    (tmp_path / "via").symlink_to(target)
    assert f"{foreign} belongs" in refusal(tmp_path / "via" / "tay.sock")


@pytest.mark.parametrize(("mode", "who"), [(0o777, "every local user"), (0o770, "group"),
                                           (0o757, "every local user")])
def test_a_directory_others_may_write_without_the_sticky_bit_is_refused(tmp_path, mode,
                                                                         who) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    message = refusal(shared / "tay.sock")
    assert f"{shared} is writable by {who}" in message and "without the sticky bit" in message
    assert f"chmod go-w {shared}" in message


def test_sticky_and_private_directories_are_accepted(tmp_path) -> None:
    sticky, private = tmp_path / "sticky", tmp_path / "private"
    sticky.mkdir()
    sticky.chmod(0o1777)
    private.mkdir(mode=0o750)
    for directory in (sticky, private):
        assert socket_directory_problem(SocketPlan(str(directory / "tay.sock"))) is None
        bind_unix_socket(SocketPlan(str(directory / "tay.sock"))).close()


def test_the_socket_appears_only_listening_and_with_its_mode(tmp_path) -> None:
    path = tmp_path / "tay.sock"
    (tmp_path / f".tay-{os.getpid()}.sock").touch()  # not a socket: left alone, bind fails
    with pytest.raises(ConfigurationError):
        bind_unix_socket(SocketPlan(str(path)))
    os.unlink(tmp_path / f".tay-{os.getpid()}.sock")
    sock = bind_unix_socket(SocketPlan(str(path)), 0o660)
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
        assert sorted(os.listdir(tmp_path)) == ["tay.sock"]  # no staging name left
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(path))  # listening from the moment the path exists
        client.close()
    finally:
        sock.close()


@as_root
def test_tay_serve_refuses_before_creating_anything(tmp_path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    os.chown(foreign, STRANGER, STRANGER)
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(data), "--init-if-missing",
         "--durability", "write", "--socket", str(foreign / "tay.sock")],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"the socket directory {foreign} belongs to uid {STRANGER}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not data.exists() and os.listdir(foreign) == []
