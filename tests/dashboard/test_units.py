"""The dashboard's pure parts: CSRF tokens and origin checks, formatting, chart geometry,
route matching and the ``--dashboard`` option."""

from __future__ import annotations

import argparse

import pytest

from tay.dashboard import app, charts, format as fmt
from tay.dashboard.csrf import CsrfGuard
from tay.failures import ConfigurationError, RequestRefused
from tay.protocol.http_api import HttpRequest
from tay.server.cli import add_http_arguments
from tay.server.http.config import http_config_from


def post(*headers: tuple[bytes, bytes]) -> HttpRequest:
    return HttpRequest("POST", "/ui/queues/q/pause", ((b"host", b"127.0.0.1:8080"), *headers))


def refused(guard: CsrfGuard, request: HttpRequest, token: str | None) -> str:
    with pytest.raises(RequestRefused) as raised:
        guard.check(request, token)
    assert raised.value.code == "csrf_rejected" and raised.value.http_status == 403
    return raised.value.message


def test_csrf_tokens_are_signed_by_this_process_and_expire():
    now = [1_700_000_000.0]
    guard = CsrfGuard(b"k" * 32, max_age_s=3600, clock=lambda: now[0])
    token = guard.issue()
    guard.check(post(), token)
    guard.check(post((b"origin", b"http://127.0.0.1:8080"),
                     (b"sec-fetch-site", b"same-origin")), token)
    assert "not issued by this server" in refused(CsrfGuard(b"x" * 32), post(), token)
    assert "no CSRF token" in refused(guard, post(), None)
    assert "malformed" in refused(guard, post(), "zz.abc")
    assert "malformed" in refused(guard, post(), "no-dot")
    issued, mac = token.split(".")
    assert "not issued" in refused(guard, post(), f"{int(issued, 16) + 1:x}.{mac}")
    now[0] += 3601
    assert "too old" in refused(guard, post(), token)


@pytest.mark.parametrize("headers", [
    ((b"origin", b"http://evil.example"),),
    ((b"origin", b"null"),),
    ((b"origin", b"http://127.0.0.1:9999"),),
    ((b"sec-fetch-site", b"cross-site"),),
    ((b"sec-fetch-site", b"same-site"),),
    ((b"origin", b"http://127.0.0.1:8080"), (b"origin", b"http://evil.example")),
])
def test_cross_origin_requests_are_refused_before_the_token(headers):
    guard = CsrfGuard()
    refused(guard, post(*headers), guard.issue())


def test_formatting():
    assert fmt.duration(850) == "850 ms" and fmt.duration(12_400) == "12.4 s"
    assert fmt.duration(300_000) == "5 min" and fmt.duration(200_000) == "3 min 20 s"
    assert fmt.duration(7_200_000) == "2 h" and fmt.duration(3 * 86_400_000) == "3 d"
    assert fmt.size(512) == "512 B" and fmt.size(1536) == "1.5 KiB"
    assert fmt.size(256 * 1024 ** 2) == "256.0 MiB"
    assert fmt.utc(0) == "1970-01-01 00:00:00" and fmt.iso(1) == "1970-01-01T00:00:00.001Z"
    assert fmt.utc(None) == "–" and fmt.utc(10 ** 30) == f"{10 ** 30} ms"
    assert fmt.relative(1_000, 61_000) == "1 min ago" and fmt.relative(5_000, 0) == "in 5.0 s"
    assert fmt.pretty_json({"b": [1, "<x>"], "a": None}) == \
        '{\n  "b": [\n    1,\n    "<x>"\n  ],\n  "a": null\n}'
    assert fmt.number(1234567) == "1,234,567" and fmt.percent(1, 4) == "25 %"
    assert fmt.retention({"hours": 72}) == "3 d" and fmt.retention({"minutes": 90}) == "1 h 30 min"
    assert fmt.retention("infinity").startswith("forever") and fmt.retention({"x": 1}) == \
        '{\n  "x": 1\n}'


def test_chart_scale_and_series():
    rows = [{"minute": m, "enqueued": 0, "completed": 0, "failed": 0} for m in range(60)]
    rows[-1] = {"minute": 59, "enqueued": 21, "completed": 13, "failed": 4}
    chart = charts.throughput(rows)
    assert chart.peak == 40 and [value for _, value in chart.grid] == [0, 10, 20, 30, 40]
    assert chart.totals == {"enqueued": 21, "completed": 13, "failed": 4}
    points = chart.lines["enqueued"].split()
    assert len(points) == 60 and points[0] == f"{charts.LEFT}.0,{chart.plot[3]}.0"
    assert [charts.throughput([{**rows[0], "enqueued": n}]).peak for n in (0, 4, 5, 9, 801)] \
        == [4, 4, 8, 20, 2000]


def test_latency_chart_draws_one_line_per_queue_on_one_scale():
    series = [{"queue": "mail", "peak_ms": 90_000, "per_minute": [0] * 58 + [30_000, 90_000]},
              {"queue": "pdf", "peak_ms": 2_000, "per_minute": [2_000] + [0] * 59}]
    chart = charts.latency(series)
    # a duration scale: four steps of 30 s, not the 50 s steps of a count
    assert chart.peak == 120_000 and chart.totals == {"mail": 90_000, "pdf": 2_000}
    assert list(chart.lines) == ["mail", "pdf"]  # the order the op ranked them in
    mail = chart.lines["mail"].split()
    # 220 high, 10 above and 22 below the plot: 188 px for 120 s
    assert len(mail) == 60 and mail[-1] == "1150.0,57.0"  # 198 - 188 * 90 / 120
    assert chart.lines["pdf"].split()[0] == "44.0,194.9"  # 198 - 188 * 2 / 120
    empty = charts.latency([])
    assert empty.lines == {} and empty.peak == 4


@pytest.mark.parametrize("top_ms", [1, 900, 2_000, 59_000, 61_000, 172_000, 3_000_000,
                                    20 * 3_600_000, 5 * 86_400_000])
def test_a_latency_charts_grid_labels_are_short_whole_durations(top_ms):
    """Each grid label fits the axis margin (a 172 s peak on 50 s steps labelled
    "3 min 20 s", cut to "in 20 s" at the chart's left edge) and names its value."""
    chart = charts.latency([{"queue": "q", "peak_ms": top_ms, "per_minute": [top_ms]}])
    assert chart.peak >= top_ms and chart.peak % 4 == 0
    labels = [fmt.axis_duration(value) for _, value in chart.grid[1:]]
    assert all(len(label) <= 6 for label in labels), labels
    for (_, value), label in zip(chart.grid[1:], labels):
        number, unit = label.split()
        scale = {"ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[unit]
        assert float(number) * scale == value
        # steps of whole durations: no "150 s" (a 50 s step), no "40 min" (a 10 min one)
        assert float(number) < {"ms": 1_000, "s": 100, "min": 91, "h": 48, "d": 100}[unit]


def test_queue_throughput_chart_draws_each_queue_completed_a_minute():
    series = [{"queue": "mail", "completed": 45, "failed": 2,
               "completed_per_minute": [0] * 58 + [15, 30], "failed_per_minute": [0] * 60},
              {"queue": "pdf", "completed": 3, "failed": 0,
               "completed_per_minute": [3] + [0] * 59, "failed_per_minute": [0] * 60}]
    chart = charts.queue_throughput(series)
    assert chart.peak == 40 and chart.totals == {"mail": 45, "pdf": 3}
    assert list(chart.lines) == ["mail", "pdf"]
    assert chart.lines["mail"].split()[-1] == "1150.0,57.0"  # 198 - 188 * 30 / 40
    assert charts.queue_throughput([]).lines == {}


def test_history_chart_labels_its_ticks_with_the_days_under_them():
    day_ms = 86_400_000
    start = 20_424 * day_ms  # 2025-12-02
    rows = [{"day": start + k * day_ms, "enqueued": k, "completed": k, "failed": 0}
            for k in range(30)]
    chart = charts.history(rows)
    assert [label for _, label in chart.ticks] == ["Dec 02", "Dec 16", "today"]
    (x0, _), (x_middle, _), (x_last, _) = chart.ticks
    middle = chart.lines["enqueued"].split()[14]  # the row the middle tick stands under
    assert middle.split(",")[0] == str(x_middle) and (x0, x_last) == (44.0, 1150.0)
    assert chart.totals == {"enqueued": 435, "completed": 435, "failed": 0}
    assert charts.history([]).ticks[-1][1] == "today"


def test_routes_match_methods_and_segments():
    handler, params = app._match("GET", ["jobs", "abc"])
    assert params == ["abc"]
    assert app._match("HEAD", ["queues"])[1] == []
    with pytest.raises(RequestRefused) as wrong:
        app._match("GET", ["jobs", "abc", "retry"])
    assert wrong.value.code == "method_not_allowed" and wrong.value.details["allow"] == "POST"
    for parts in (["jobs", ""], ["nope"], ["jobs", "a", "b", "c"]):
        with pytest.raises(RequestRefused) as missing:
            app._match("GET", parts)
        assert missing.value.code == "not_found"


def test_dashboard_option():
    parser = argparse.ArgumentParser()
    add_http_arguments(parser)
    assert http_config_from(parser.parse_args(["--http-port", "0"]), {}).dashboard is True
    off = http_config_from(parser.parse_args(["--http-port", "0"]), {"TAY_DASHBOARD": "off"})
    assert off.dashboard is False
    flag_wins = parser.parse_args(["--http-port", "0", "--dashboard", "on"])
    assert http_config_from(flag_wins, {"TAY_DASHBOARD": "off"}).dashboard is True
    with pytest.raises(ConfigurationError) as bad:
        http_config_from(parser.parse_args(["--http-port", "0"]), {"TAY_DASHBOARD": "yes"})
    assert bad.value.option == "--dashboard" and "'yes'" in bad.value.message


def test_the_tasks_page_names_the_row_of_the_pairs_past_the_cap(monkeypatch):
    """Rendered from a real engine's ``tasks`` reply: the shared row of the pairs counted
    after the cap is "Other pairs", with no link to a queue or task named ""."""
    import asyncio

    from tay.engine import Execute, Reply, activity
    from tay.engine import commands as c
    from tests.engine.conftest import Driver

    monkeypatch.setattr(activity, "PAIRS_MAX", 2)
    driver = Driver()
    driver.worker(conn="w1", tasks=("t",), capacity=4)
    for n in range(4):
        out = driver.enqueue(task="t", queue=f"tenant-{n}")
        (execute,) = [e for e in out.effects if isinstance(e, Execute)]
        driver.succeed(execute)

    async def admin_call(op, body, origin):
        if op == "status":  # the server's facts (tay.server.admin), not this page's subject:
            return Reply(None, None, "admin_status", None)  # the header is left out
        (effect,) = driver.run(c.Admin("dashboard", driver.rid(), op, body)).effects
        return effect

    dashboard = app.Dashboard(admin_call)
    page = asyncio.run(dashboard.handle(HttpRequest("GET", "/ui/tasks",
                                                    ((b"host", b"127.0.0.1:8080"),))))
    text = page.body.decode()
    assert page.status == 200
    assert 'href="/ui/jobs?queue=tenant-0"' in text and 'href="/ui/jobs?queue=tenant-1"' in text
    assert "tenant-2" not in text and "tenant-3" not in text
    assert ">Other pairs</abbr>" in text and "first counted after 4,096 pairs" in text
    assert 'href="/ui/jobs?queue="' not in text


@pytest.mark.parametrize("top", [0, 7, 9_999, 10_001, 60_000, 801_000, 2_400_000,
                                 1_300_000_000])
def test_a_count_charts_grid_labels_fit_the_axis_margin(top):
    """A busy day's history (a million jobs) labelled its grid 1000000: seven digits, cut
    at the chart's left edge. Labels are at most five characters and name their value."""
    chart = charts.history([{"day": 0, "enqueued": top, "completed": 0, "failed": 0}])
    for _, value in chart.grid:
        label = fmt.axis_count(value)
        assert len(label) <= 5, label
        scale = {"k": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(label[-1], 1)
        assert float(label.rstrip("kMG")) * scale == value
