"""Fixtures of the dashboard tests: one real ``tay serve`` (HTTP on, dashboard on) with one
real SDK worker process for this package, and one headless Debian Chromium driven by
Playwright for the browser module. (Playwright's sync API keeps its event loop marked as
running in this thread while it is open, which breaks ``asyncio.run`` in any test after
it; the module scope closes it when the browser tests end.)

Without /usr/bin/chromium (or the playwright package) the browser tests are skipped, and
the run ends with a loud summary saying so: ``make test`` installs Chromium when it runs
as root (see the Makefile); never ``playwright install``.
"""

from __future__ import annotations

import os

import pytest

from tests.dashboard.engine import started_engine

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps reaching for Google services.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
_browser_missing: list[str] = []


@pytest.fixture(scope="package")
def ui_engine():
    with started_engine() as engine:
        yield engine


@pytest.fixture(scope="module")
def browser():
    reason = None
    if not os.access(CHROMIUM, os.X_OK):
        reason = (f"{CHROMIUM} is missing: install Debian's chromium (`make test` does when "
                  "run as root)")
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            reason = "the playwright package is missing: `make venv` installs the dev extra"
    if reason is not None:
        _browser_missing.append(reason)
        pytest.skip(f"BROWSER TESTS NOT RUN: {reason}")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser, ui_engine):
    context = browser.new_context(base_url=ui_engine.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def pytest_terminal_summary(terminalreporter):
    if _browser_missing:
        terminalreporter.section("BROWSER TESTS NOT RUN", sep="!", red=True, bold=True)
        terminalreporter.write_line(f"The dashboard's browser tests were skipped: "
                                    f"{_browser_missing[0]}", red=True, bold=True)
