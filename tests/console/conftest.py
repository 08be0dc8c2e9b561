"""The console's browser tests: one headless Debian chromium for the session, a node per test.

``chrome`` is the only way to a WebDriver: Debian's /usr/bin/chromedriver given explicitly (and
SE_OFFLINE set), so Selenium Manager never looks for or downloads a driver. Without the binaries
the tests are skipped, saying how to get them (``make test`` installs both); a browser and driver
of different major versions fail, as the driver would refuse it later less clearly.

After each test that used the browser, any SEVERE entry of the browser log (a JS error, a CSP
violation, a failed load) logged while its page was open fails it. The page is left before the
test's fixtures end, so a poll of a node being stopped is not taken for an error.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pylmq.node.testing import NodeThread, local_options

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

selenium = pytest.importorskip("selenium", reason="the test extra installs selenium (pip install -e '.[test]')")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.chrome.webdriver import WebDriver  # noqa: E402

from tests.console.browser import severe_entries  # noqa: E402


def _major(binary: str) -> int:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    m = re.search(r"(\d+)\.\d+\.\d+", out)
    if m is None:
        raise AssertionError(f"{binary} --version printed no version: {out!r}")
    return int(m.group(1))


@pytest.fixture(scope="session")
def chrome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless chromium driven by Debian's chromedriver, shared by the session's tests."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.access(binary, os.X_OK):
            pytest.skip(f"{binary} is missing: make test installs chromium and chromium-driver")
    browser, driver_major = _major(CHROMIUM), _major(CHROMEDRIVER)
    if browser != driver_major:
        pytest.fail(f"chromium {browser} and chromedriver {driver_major} differ: install both together")
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager reach the network
    tmp = tmp_path_factory.mktemp("chrome")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1366,900",
        "--lang=en-US",
        f"--user-data-dir={tmp / 'profile'}",
    ):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # chromium refuses to run as root with its sandbox
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(tmp / "chromedriver.log"))
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromium and the driver's own process (no kill by name)


LEFT_PAGE = pytest.StashKey[list[dict[str, Any]]]()


def _leave_page(driver: WebDriver) -> list[dict[str, Any]]:
    """Clear the page's token, take the SEVERE entries logged so far, and leave the page (what
    leaving logs, an aborted poll, is dropped)."""
    try:
        driver.execute_script("try { sessionStorage.clear(); } catch (e) {}")
    finally:
        severe = severe_entries(driver)
        driver.get("about:blank")
        severe_entries(driver)
    return severe


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Fixtures end in the reverse order of their start: the test's node, started after the
    # browser, stops before the browser's check, and a page still polling it would log refused
    # requests in between. So the page is left here, before any fixture ends.
    driver = getattr(item, "funcargs", {}).get("browser")
    if isinstance(driver, WebDriver):
        item.stash[LEFT_PAGE] = _leave_page(driver)


@pytest.fixture
def browser(request: pytest.FixtureRequest, chrome: WebDriver) -> Iterator[WebDriver]:
    """The session's browser with a clean slate (no page, no token, empty log); fails the test
    on any SEVERE browser log entry logged while the test's page was open."""
    chrome.get("about:blank")
    chrome.delete_all_cookies()
    severe_entries(chrome)  # drop what earlier tests left
    yield chrome
    severe = request.node.stash.get(LEFT_PAGE, None)
    if severe is None:  # the teardown hook did not run (setup failed after this fixture)
        severe = _leave_page(chrome)
    assert not severe, f"the browser logged errors: {severe}"


@pytest.fixture
def console_node() -> Iterator[NodeThread]:
    """A memory-store node with the console, on its own loop in a thread (blocking Selenium and
    HttpClient calls never stall it), on a free 127.0.0.1 port."""
    with NodeThread(local_options(rpc=None)) as node:
        yield node


@pytest.fixture
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``<pytest's base temp>/console`` (printed by browser.screenshot)."""
    return tmp_path_factory.getbasetemp() / "console"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the browser is marked ``browser`` (``-m "not browser"`` skips them)."""
    for item in items:
        if "chrome" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
