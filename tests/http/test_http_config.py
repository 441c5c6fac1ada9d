"""``tay serve`` HTTP options: flags, ``TAY_HTTP_*`` variables and the TLS rules."""

from __future__ import annotations

import argparse

import pytest

from tay.failures import ConfigurationError
from tay.server.cli import add_http_arguments
from tay.server.http.config import apply_http, http_config_from, tls_context


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket")
    add_http_arguments(parser)
    return parser.parse_args(argv)


def test_no_port_means_no_http():
    assert http_config_from(parse(), {}) is None


def test_loopback_defaults_and_environment():
    config = http_config_from(parse(), {"TAY_HTTP_PORT": "8080"})
    assert (config.ip, config.port, config.tls) == ("127.0.0.1", 8080, False)
    assert http_config_from(parse("--http-port", "1", "--http-ip", "::1"), {}).ip == "::1"
    flag_wins = http_config_from(parse("--http-port", "9"), {"TAY_HTTP_PORT": "8"})
    assert flag_wins.port == 9


@pytest.mark.parametrize("argv, option", [
    (("--http-port", "x"), "--http-port"),
    (("--http-port", "70000"), "--http-port"),
    (("--http-port", "1", "--http-ip", "nope"), "--http-ip"),
    (("--http-port", "1", "--http-ip", "0.0.0.0"), "--http-ip"),
    (("--http-port", "1", "--http-tls-certfile", "/a"), "--http-tls-keyfile"),
    (("--http-port", "1", "--http-max-body-bytes", "0"), "--http-max-body-bytes"),
])
def test_bad_options_name_themselves(argv, option):
    with pytest.raises(ConfigurationError) as refused:
        http_config_from(parse(*argv), {})
    assert refused.value.option == option


def test_non_loopback_needs_all_three_absolute_regular_files(tmp_path):
    files = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    for path in files.values():
        path.write_text("x")
    argv = ["--http-port", "1", "--http-ip", "10.0.0.1", "--http-tls-certfile",
            str(files["cert"]), "--http-tls-keyfile", str(files["key"])]
    with pytest.raises(ConfigurationError):
        http_config_from(parse(*argv), {})
    env = {"TAY_HTTP_TLS_CACERTFILE": str(files["ca"])}
    config = http_config_from(parse(*argv), env)
    assert config.tls and config.cacertfile == str(files["ca"])
    with pytest.raises(ConfigurationError, match="absolute"):
        http_config_from(parse(*argv), {"TAY_HTTP_TLS_CACERTFILE": "ca.pem"})
    with pytest.raises(ConfigurationError, match="regular file"):
        http_config_from(parse(*argv), {"TAY_HTTP_TLS_CACERTFILE": str(tmp_path)})
    with pytest.raises(ConfigurationError) as unloadable:  # not PEM: refused at start
        tls_context(config)
    assert unloadable.value.option == "--http-tls-certfile"



def test_http_disables_only_the_implicit_socket():
    from tay.server.app import ServeConfig

    def Serve(socket: object) -> ServeConfig:
        return ServeConfig(data_dir="/data", socket=socket)  # type: ignore[arg-type]

    implicit = apply_http(parse("--http-port", "1"), {}, Serve("plan"))[0]
    assert implicit.socket is None
    explicit = apply_http(parse("--http-port", "1", "--socket", "/x"), {}, Serve("plan"))[0]
    assert explicit.socket == "plan"
    by_env = apply_http(parse("--http-port", "1"), {"TAY_SOCKET_PATH": "/x"}, Serve("plan"))[0]
    assert by_env.socket == "plan"
    no_http = apply_http(parse(), {}, Serve("plan"))
    assert no_http == (Serve("plan"), None)
