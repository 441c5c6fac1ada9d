"""Socket discovery order, with injected environment, uid and directory checks."""

import pytest

from tay.errors import ValidationError
from tay.sdk.socket_path import resolve_socket_path


def resolve(environ, *, usable=(), shared=False, uid=4242, explicit=None):
    return resolve_socket_path(explicit, environ=environ, uid=uid, usable_directory=lambda p: p in usable,
                               shared_directory=lambda p: shared)


def test_explicit_then_environment_win_over_everything():
    env = {"TAY_SOCKET_PATH": "/srv/tay.sock", "XDG_RUNTIME_DIR": "/run/user/1"}
    assert resolve(env, explicit="/a/b/../c.sock", shared=True, usable={"/run/user/1"}) == "/a/c.sock"
    assert resolve(env, shared=True, usable={"/run/user/1"}) == "/srv/tay.sock"


def test_shared_run_tay_directory_comes_before_user_directories():
    assert resolve({"XDG_RUNTIME_DIR": "/run/user/1"}, shared=True, usable={"/run/user/1"}) == "/run/tay/tay.sock"


def test_automatic_order_xdg_tmpdir_tmp():
    env = {"XDG_RUNTIME_DIR": "/runtime", "TMPDIR": "/temporary"}
    assert resolve(env, usable={"/runtime", "/temporary"}) == "/runtime/tay/tay.sock"
    assert resolve(env, usable={"/temporary"}) == "/temporary/tay-4242/tay.sock"
    assert resolve(env) == "/tmp/tay-4242/tay.sock"
    assert resolve({}, uid=7) == "/tmp/tay-7/tay.sock"


def test_too_long_automatic_candidate_is_skipped_but_configured_one_is_an_error():
    long_dir = "/" + "d" * 120
    assert resolve({"XDG_RUNTIME_DIR": long_dir}, usable={long_dir}) == "/tmp/tay-4242/tay.sock"
    with pytest.raises(ValidationError, match="TAY_SOCKET_PATH"):
        resolve({"TAY_SOCKET_PATH": long_dir + "/tay.sock"})
    with pytest.raises(ValidationError, match="absolute"):
        resolve({}, explicit="relative.sock")


def test_uid_must_be_a_non_negative_integer():
    with pytest.raises(ValidationError, match="UID"):
        resolve({}, uid=-1)


def test_real_defaults_do_not_touch_the_filesystem(tmp_path):
    path = resolve_socket_path(environ={"XDG_RUNTIME_DIR": str(tmp_path)}, uid=1, shared_directory=lambda p: False)
    assert path == str(tmp_path / "tay" / "tay.sock")
    assert not (tmp_path / "tay").exists()
