"""Socket discovery order, path rules and safe claiming of the path (real files in a temp dir)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from tay.failures import ConfigurationError
from tay.server.uds.socket_path import (
    SocketPlan, bind_unix_socket, check_outside_data_dir, remove_socket, resolve_socket_path,
)
from tests.unprivileged import NOBODY, unprivileged

ALWAYS = lambda path: True  # noqa: E731
NEVER = lambda path: False  # noqa: E731


def resolve(env: dict[str, str], explicit: str | None = None, usable=ALWAYS,
            run_dir: str = "/nonexistent-run-tay"):
    return resolve_socket_path(explicit, environ=env, uid=1000, usable_directory=usable,
                               shared_run_dir=run_dir)


def test_discovery_order(tmp_path) -> None:
    env = {"TAY_SOCKET_PATH": "/srv/a.sock", "XDG_RUNTIME_DIR": "/run/user/1000", "TMPDIR": "/var/t"}
    assert resolve(env, "/x/explicit.sock") == SocketPlan("/x/explicit.sock")
    assert resolve(env) == SocketPlan("/srv/a.sock")
    del env["TAY_SOCKET_PATH"]
    run_dir = tmp_path / "run-tay"
    run_dir.mkdir()
    # discovered (automatic) paths are shared by default: start-up says so when one is taken
    assert resolve(env, run_dir=str(run_dir)) == SocketPlan(f"{run_dir}/tay.sock", automatic=True)
    assert resolve(env) == SocketPlan("/run/user/1000/tay/tay.sock", "/run/user/1000/tay", automatic=True)
    assert resolve(env, usable=lambda p: p != "/run/user/1000") == SocketPlan(
        "/var/t/tay-1000/tay.sock", "/var/t/tay-1000", automatic=True)
    assert resolve(env, usable=lambda p: p == "/tmp") == SocketPlan(
        "/tmp/tay-1000/tay.sock", "/tmp/tay-1000", automatic=True)
    with pytest.raises(ConfigurationError, match="/tmp"):
        resolve(env, usable=NEVER)


def test_off_disables_and_empty_env_is_ignored() -> None:
    assert resolve({"TAY_SOCKET_PATH": "off"}) is None
    assert resolve({}, "off") is None
    assert resolve({"TAY_SOCKET_PATH": ""}).path == "/tmp/tay-1000/tay.sock"


def test_too_long_automatic_candidates_are_skipped_but_explicit_ones_refused() -> None:
    long_dir = "/" + "d" * 95
    assert resolve({"XDG_RUNTIME_DIR": long_dir}).path == "/tmp/tay-1000/tay.sock"
    with pytest.raises(ConfigurationError, match="TAY_SOCKET_PATH"):
        resolve({"TAY_SOCKET_PATH": long_dir + "/tay.sock"})
    with pytest.raises(ConfigurationError, match="--socket"):
        resolve({}, "relative/tay.sock")
    with pytest.raises(ConfigurationError):
        resolve({}, "/a\x00b")
    assert resolve({}, "/a/../b/tay.sock").path == "/b/tay.sock"
    with pytest.raises(ConfigurationError, match="uid"):
        resolve_socket_path(environ={}, uid=-1, usable_directory=ALWAYS,
                            shared_run_dir="/nonexistent-run-tay")


def test_socket_must_stay_outside_the_data_dir(tmp_path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="inside the data directory"):
        check_outside_data_dir(str(data / "tay.sock"), str(data))
    with pytest.raises(ConfigurationError):
        check_outside_data_dir(str(data / "sub" / "tay.sock"), str(data))
    check_outside_data_dir(str(tmp_path / "data-sock" / "tay.sock"), str(data))


def test_bind_makes_private_dir_and_socket_mode(tmp_path) -> None:
    private = tmp_path / "tay-1000"
    plan = SocketPlan(str(private / "tay.sock"), str(private))
    sock = bind_unix_socket(plan)
    try:
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(plan.path).st_mode) == 0o600
    finally:
        sock.close()
    remove_socket(plan.path)
    assert not os.path.exists(plan.path)
    with pytest.raises(ConfigurationError, match="0600 or 0660"):
        bind_unix_socket(plan, mode=0o666)


def test_stale_socket_is_reclaimed_live_one_and_file_are_not(tmp_path) -> None:
    path = str(tmp_path / "tay.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # bound, never listening: connect is refused
    bind_unix_socket(SocketPlan(path)).close()
    live = bind_unix_socket(SocketPlan(path))
    try:
        with pytest.raises(ConfigurationError, match="in use"):
            bind_unix_socket(SocketPlan(path))
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        live.close()
    os.unlink(path)
    with open(path, "w") as handle:
        handle.write("keep me")
    with pytest.raises(ConfigurationError, match="not a socket"):
        bind_unix_socket(SocketPlan(path))
    remove_socket(path)  # a regular file is never removed either
    assert open(path).read() == "keep me"


@pytest.fixture
def unprivileged_dirs():
    """``locked`` (0500) and ``open`` (0700), both owned by the user the child runs as, in
    a fresh 0755 directory of our own (pytest's temp root is 0700: nobody could not reach it)."""
    base = Path(tempfile.mkdtemp(prefix="tay-perm-"))
    base.chmod(0o755)
    owner = NOBODY if os.geteuid() == 0 else os.geteuid()
    locked, open_dir = base / "locked", base / "open"
    for directory, mode in ((locked, 0o500), (open_dir, 0o700)):
        directory.mkdir()
        if owner != os.geteuid():
            os.chown(directory, owner, owner)
        directory.chmod(mode)
    yield locked, open_dir
    locked.chmod(0o700)
    shutil.rmtree(base)


def test_access_failure_names_path_and_os_error(unprivileged_dirs) -> None:
    locked, open_dir = unprivileged_dirs

    def bind_in(directory):
        def action() -> str:
            sock = bind_unix_socket(SocketPlan(str(directory / "tay.sock")))
            sock.close()
            return "bound"
        return action

    assert unprivileged(bind_in(open_dir)) == "ok: bound"  # the control: this user can bind
    outcome = unprivileged(bind_in(locked))
    assert outcome.startswith("ConfigurationError") and "EACCES" in outcome, outcome
    assert str(locked) in outcome, outcome
    assert not (locked / "tay.sock").exists()
