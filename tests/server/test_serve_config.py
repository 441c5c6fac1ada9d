"""``tay serve`` configuration: history caps and the reply limit reach ``EngineConfig``."""

from __future__ import annotations

import pytest

from tay.cli import build_parser
from tay.failures import ConfigurationError
from tay.server.cli import build_config, fit_replies, run
from tay.server.http.config import apply_http


def parse(*flags: str):
    return build_parser().parse_args(["serve", "--data-dir", "/work/x", "--socket", "off", *flags])


def config_of(*flags: str, env: dict[str, str] | None = None):
    args = parse(*flags)
    env = env or {}
    config, http = apply_http(args, env, build_config(args, env))
    return fit_replies(config, http)


def test_history_caps_default_to_unlimited() -> None:
    engine = config_of().engine
    assert engine.max_history_bytes is None and engine.max_segments is None


def test_history_caps_from_flags_with_size_suffixes() -> None:
    engine = config_of("--max-history-bytes", "2MiB", "--max-segments", "7").engine
    assert engine.max_history_bytes == 2 * 1_048_576
    assert engine.max_segments == 7
    assert engine.history_caps.max_segments == 7


def test_the_executor_result_limit_reaches_the_engine_and_the_caps_reserve() -> None:
    engine = config_of("--executor-result-bytes", "1000").engine
    assert engine.result_bytes == 1000 and engine.history_caps.result_bytes == 1000
    assert config_of().engine.result_bytes == 65_536


def test_history_caps_from_environment_and_flags_win() -> None:
    env = {"TAY_MAX_HISTORY_BYTES": "3 KB", "TAY_MAX_SEGMENTS": "4"}
    assert config_of(env=env).engine.max_history_bytes == 3_000
    assert config_of(env=env).engine.max_segments == 4
    assert config_of("--max-segments", "9", env=env).engine.max_segments == 9


@pytest.mark.parametrize(("flags", "option"), [
    (("--max-history-bytes", "0"), "--max-history-bytes"),
    (("--max-history-bytes", "12 parsecs"), "--max-history-bytes"),
    (("--max-segments", "0"), "--max-segments"),
    (("--max-segments", "many"), "--max-segments"),
])
def test_bad_history_caps_name_the_option(flags: tuple[str, ...], option: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        config_of(*flags)
    assert refused.value.option == option


def test_bad_cap_exits_2_with_the_option_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(parse("--max-segments", "-1"), environ={}) == 2
    assert "--max-segments" in capsys.readouterr().err


def test_reply_limit_is_the_smaller_transport_limit() -> None:
    assert config_of().engine.max_reply_bytes == 1_048_576
    assert config_of("--max-frame-bytes", "65536").engine.max_reply_bytes == 65_536
    with_http = config_of("--max-frame-bytes", "65536", "--http-port", "0",
                          "--http-max-body-bytes", "4096")
    assert with_http.engine.max_reply_bytes == 4_096
    larger_body = config_of("--max-frame-bytes", "65536", "--http-port", "0",
                            "--http-max-body-bytes", "200000")
    assert larger_body.engine.max_reply_bytes == 65_536


def test_serve_help_names_both_listeners() -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "--http-port" in help_text["serve"].format_help()
    [serve_choice] = [a for a in build_parser()._subparsers._group_actions[0]._choices_actions
                      if a.dest == "serve"]
    assert "HTTP" in serve_choice.help and "Unix-socket" in serve_choice.help


@pytest.mark.parametrize(("flags", "option"), [
    (("--max-frame-bytes", "0"), "--max-frame-bytes"),
    (("--max-connections", "0"), "--max-connections"),
    (("--request-timeout-ms", "0"), "--request-timeout-ms"),
    (("--hello-timeout-ms", "0"), "--hello-timeout-ms"),
    (("--frame-timeout-ms", "3600001"), "--frame-timeout-ms"),
    (("--executor-result-bytes", "-1"), "--executor-result-bytes"),
    (("--client-slots", "0"), "--client-slots"),
    (("--client-bytes", "1"), "--client-bytes"),
])
def test_limits_checked_by_the_config_objects_name_the_flag(flags: tuple[str, ...],
                                                            option: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        config_of(*flags)
    assert refused.value.option == option
    assert refused.value.message.startswith(f"{option}: must be")


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("--log-level", "loud")
    assert exited.value.code == 2
    assert "--log-level" in capsys.readouterr().err
    assert parse("--log-level", "debug").log_level == "DEBUG"


def test_group_commit_linger_from_flag_or_environment() -> None:
    assert config_of().group_commit_linger is False
    flags = ("--group-commit-max-events", "64", "--group-commit-interval-ms", "5")
    assert config_of(*flags, "--group-commit-linger").group_commit_linger is True
    assert config_of(*flags, env={"TAY_GROUP_COMMIT_LINGER": "1"}).group_commit_linger is True


@pytest.mark.parametrize("flags", [
    ("--group-commit-linger",),  # per-event commit has nothing to linger for
    ("--group-commit-linger", "--group-commit-max-events", "64"),  # no interval: no bound
])
def test_group_commit_linger_needs_batches_and_an_interval(flags: tuple[str, ...]) -> None:
    with pytest.raises(ConfigurationError) as refused:
        config_of(*flags)
    assert refused.value.option == "--group-commit-linger"


def test_group_commit_gather_us_from_flag_or_environment() -> None:
    from tay.storage.journal.commit import GATHER_US

    assert config_of().group_commit_gather_us == GATHER_US
    assert config_of("--group-commit-gather-us", "0").group_commit_gather_us == 0
    assert config_of(env={"TAY_GROUP_COMMIT_GATHER_US": "250"}).group_commit_gather_us == 250
    with pytest.raises(ConfigurationError) as refused:
        config_of("--group-commit-gather-us", "-1")
    assert refused.value.option == "--group-commit-gather-us"


def test_loop_stall_ms_from_flag_or_environment() -> None:
    assert config_of().loop_stall_ms == 500
    assert config_of("--loop-stall-ms", "0").loop_stall_ms == 0
    assert config_of(env={"TAY_LOOP_STALL_MS": "250"}).loop_stall_ms == 250
    assert config_of("--loop-stall-ms", "80", env={"TAY_LOOP_STALL_MS": "250"}).loop_stall_ms == 80
    for bad in ("-1", "3600001", "soon"):
        with pytest.raises(ConfigurationError) as refused:
            config_of("--loop-stall-ms", bad)
        assert refused.value.option == "--loop-stall-ms"
    with pytest.raises(ConfigurationError) as refused:
        config_of(env={"TAY_LOOP_STALL_MS": "1.5"})
    assert "TAY_LOOP_STALL_MS" in str(refused.value) or refused.value.option == "--loop-stall-ms"


def test_store_v2_options_default_and_from_flags_or_environment() -> None:
    from tay.storage.v2 import Retention

    default = config_of()
    assert default.terminal_retention == Retention("hours", 24)
    assert default.compaction.enabled and default.compaction.history_bytes == 64 * 2**20
    assert default.compaction.ratio == 2.0 and default.compaction.state_ratio == 0.5
    flags = config_of("--terminal-retention", "90m", "--compaction", "off",
                      "--compact-history-bytes", "16MiB", "--compact-ratio", "3",
                      "--compact-state-ratio", "0.7")
    assert flags.compaction.state_ratio == 0.7
    assert flags.terminal_retention == Retention("minutes", 90)
    assert not flags.compaction.enabled and flags.compaction.history_bytes == 16 * 2**20
    assert flags.compaction.ratio == 3.0
    env = config_of(env={"TAY_TERMINAL_RETENTION": "2d", "TAY_COMPACTION": "off",
                         "TAY_COMPACT_HISTORY_BYTES": "1MB", "TAY_COMPACT_RATIO": "1.5",
                         "TAY_COMPACT_STATE_RATIO": "0.25"})
    assert env.compaction.state_ratio == 0.25
    assert env.terminal_retention == Retention("hours", 48)
    assert (env.compaction.enabled, env.compaction.history_bytes, env.compaction.ratio) == (
        False, 10**6, 1.5)
    assert config_of("--terminal-retention", "infinity").terminal_retention.unit == "infinity"
    assert not default.compaction.on_stop  # a stop that compacts is asked for
    assert config_of("--compact-on-stop", "on").compaction.on_stop
    assert config_of(env={"TAY_COMPACT_ON_STOP": "on"}).compaction.on_stop
    assert not config_of("--compact-on-stop", "off",
                         env={"TAY_COMPACT_ON_STOP": "on"}).compaction.on_stop


@pytest.mark.parametrize(("flags", "env", "option"), [
    (("--terminal-retention", "3w"), {}, "--terminal-retention"),
    (("--terminal-retention=-1h",), {}, "--terminal-retention"),
    ((), {"TAY_TERMINAL_RETENTION": "forever"}, "TAY_TERMINAL_RETENTION"),
    ((), {"TAY_COMPACTION": "maybe"}, "TAY_COMPACTION"),
    (("--compact-ratio", "1.0"), {}, "--compact-ratio"),
    (("--compact-ratio", "two"), {}, "--compact-ratio"),
    (("--compact-history-bytes", "0"), {}, "--compact-history-bytes"),
    (("--compact-state-ratio", "1"), {}, "--compact-state-ratio"),
    (("--compact-state-ratio", "half"), {}, "--compact-state-ratio"),
    ((), {"TAY_COMPACT_STATE_RATIO": "0.01"}, "TAY_COMPACT_STATE_RATIO"),
    ((), {"TAY_COMPACT_ON_STOP": "yes"}, "TAY_COMPACT_ON_STOP"),
    (("--terminal-retention", "9999999999999999h"), {}, "--terminal-retention"),
])
def test_bad_store_v2_options_name_the_option(flags, env, option) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config_of(*flags, env=env)
    assert caught.value.option == option


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_serve_help_shows_the_store_v2_options_with_defaults(capsys, monkeypatch,
                                                             columns) -> None:
    monkeypatch.setenv("COLUMNS", columns)  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # as wrapped at any terminal width
    for needle in ("--terminal-retention", "TAY_TERMINAL_RETENTION", "24h", "--compaction",
                   "TAY_COMPACTION", "--compact-history-bytes", "64 MiB", "--compact-ratio",
                   "TAY_COMPACT_RATIO", "--compact-state-ratio", "TAY_COMPACT_STATE_RATIO",
                   "(default 0.5)", "--compact-on-stop", "TAY_COMPACT_ON_STOP"):
        assert needle in text


@pytest.mark.parametrize(("flags", "env", "served"), [
    (("--http-port", "0"), {}, True),
    (("--http-port", "0", "--dashboard", "off"), {}, False),
    (("--http-port", "0"), {"TAY_DASHBOARD": "off"}, False),
    ((), {}, False),  # no HTTP listener: nothing to serve it on
])
def test_the_command_line_hands_the_server_the_dashboard_when_it_is_on(
        flags: tuple[str, ...], env: dict[str, str], served: bool, monkeypatch) -> None:
    """The server imports no dashboard: ``tay serve``'s command line hands it in."""
    from tay.server import app, cli

    handed = []
    monkeypatch.setattr(app, "run_serve", lambda config, http, ui: handed.append(ui) or 0)
    assert run(parse(*flags), environ=env) == 0
    assert handed == [cli.dashboard if served else None]


def test_the_dashboard_handed_in_is_the_ui_layers_own() -> None:
    from tay.dashboard import Dashboard
    from tay.server.cli import dashboard

    async def admin_call(*args):
        raise AssertionError("not called")

    assert type(dashboard(admin_call)) is Dashboard
