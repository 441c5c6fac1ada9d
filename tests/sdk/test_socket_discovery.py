"""The shared discovery order (tay.socket_discovery): sources, private dirs, errors, and the
SDK and the server resolving the same path for the same environment."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.failures import ConfigurationError
from tay.errors import ValidationError
from tay.sdk.socket_path import resolve_socket_path as sdk_resolve
from tay.server.uds.socket_path import resolve_socket_path as server_resolve
from tay.socket_discovery import (FROM_ENVIRONMENT, FROM_EXPLICIT, FROM_SHARED_DIR, FROM_TMP_FALLBACK, FROM_USER_DIR,
                                  DiscoveredSocket, SocketPathError, discover_socket)

NO_SHARED_DIR = "/nonexistent-run-tay"


def discover(environ, *, usable=(), shared=False, explicit=None):
    return discover_socket(explicit, environ=environ, uid=7, usable_directory=lambda p: p in usable,
                           shared_directory_exists=lambda p: shared)


def test_each_step_reports_its_source_and_private_dir():
    env = {"XDG_RUNTIME_DIR": "/runtime", "TMPDIR": "/temporary"}
    assert discover(env, explicit="/x/y.sock") == DiscoveredSocket("/x/y.sock", FROM_EXPLICIT)
    assert discover({**env, "TAY_SOCKET_PATH": "/srv/t.sock"}) == DiscoveredSocket("/srv/t.sock", FROM_ENVIRONMENT)
    assert discover(env, shared=True) == DiscoveredSocket("/run/tay/tay.sock", FROM_SHARED_DIR)
    assert discover(env, usable={"/runtime"}) == DiscoveredSocket("/runtime/tay/tay.sock", FROM_USER_DIR,
                                                                  "/runtime/tay")
    assert discover(env, usable={"/temporary"}) == DiscoveredSocket("/temporary/tay-7/tay.sock", FROM_USER_DIR,
                                                                    "/temporary/tay-7")
    assert discover(env) == DiscoveredSocket("/tmp/tay-7/tay.sock", FROM_TMP_FALLBACK, "/tmp/tay-7")


def test_errors_name_the_option_and_each_side_keeps_its_own_error_type():
    with pytest.raises(SocketPathError, match="^TAY_SOCKET_PATH: ") as caught:
        discover({"TAY_SOCKET_PATH": "relative.sock"})
    assert caught.value.option == "TAY_SOCKET_PATH"
    with pytest.raises(SocketPathError, match="^--socket: "):
        discover_socket("/" + "x" * 120, explicit_option="--socket", environ={})
    with pytest.raises(ValidationError, match="socket_path"):
        sdk_resolve("nul\x00.sock", environ={})
    with pytest.raises(ConfigurationError, match="--socket"):
        server_resolve("nul\x00.sock", environ={}, shared_run_dir=NO_SHARED_DIR)


DIRECTORIES = st.sampled_from(["/runtime", "/temporary", "/" + "d" * 97, "relative"])


@settings(max_examples=100, deadline=None)
@given(xdg=st.none() | DIRECTORIES, tmpdir=st.none() | DIRECTORIES,
       configured=st.none() | st.sampled_from(["/srv/tay.sock", "/a/../b.sock", "", "/" + "p" * 101]),
       usable=st.sets(DIRECTORIES))
def test_sdk_connects_where_the_server_listens(xdg, tmpdir, configured, usable):
    environ = {name: value for name, value in
               (("XDG_RUNTIME_DIR", xdg), ("TMPDIR", tmpdir), ("TAY_SOCKET_PATH", configured)) if value is not None}
    usable_directory = (lambda path: path in usable or path == "/tmp")
    try:
        expected = server_resolve(environ=environ, uid=1000, usable_directory=usable_directory,
                                  shared_run_dir=NO_SHARED_DIR)
    except ConfigurationError:
        with pytest.raises(ValidationError):
            sdk_resolve(environ=environ, uid=1000, usable_directory=usable_directory,
                        shared_directory=lambda path: False)
        return
    assert expected is not None
    assert sdk_resolve(environ=environ, uid=1000, usable_directory=usable_directory,
                       shared_directory=lambda path: False) == expected.path
