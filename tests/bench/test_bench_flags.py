"""``tay bench``: a bad flag is refused before any server starts, naming the flag, exit 2."""

from __future__ import annotations

import pytest

from tay.bench.cli import run
from tay.cli import build_parser


@pytest.mark.parametrize(("flags", "flag"), [
    (("--jobs", "0"), "--jobs"),
    (("--jobs", "-3"), "--jobs"),
    (("--producer-processes", "0"), "--producer-processes"),
    (("--worker-processes", "0"), "--worker-processes"),
    (("--group-commit-max-events", "0"), "--group-commit-max-events"),
    (("--group-commit-interval-ms", "-1"), "--group-commit-interval-ms"),
    (("--modes", "bogus"), "--modes"),
])
def test_bad_flag_exits_2_naming_it(flags: tuple[str, ...], flag: str, tmp_path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["bench", "quick", "--dir", str(tmp_path), *flags])
    assert run(args) == 2
    assert capsys.readouterr().err.startswith(f"tay bench: {flag}: ")
    assert list(tmp_path.iterdir()) == []  # refused before any run directory was made


def test_unknown_profile_exits_2(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["bench", "no-such-profile", "--dir", str(tmp_path)])
    assert run(args) == 2
    assert "PROFILE" in capsys.readouterr().err
