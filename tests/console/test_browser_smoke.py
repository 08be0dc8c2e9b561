"""The console loads in a real browser and shows what the API did (the harness's smoke test)."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, screenshot, wait_for, wait_text


def _depth(driver: WebDriver, queue: str) -> str | None:
    for row in by_test(driver, "queue-row"):
        if row.get_attribute("data-queue") == queue:
            return row.find_element(By.CSS_SELECTOR, '[data-test="queue-size"]').text
    return None


def test_overview_shows_a_queue_pushed_over_the_api_and_its_depth(
    browser: WebDriver, console_node: NodeThread, shots: Path
) -> None:
    with HttpClient(console_node.http_url) as client:
        for body in (b"a", b"b", b"c"):
            client.push("orders", body)
        open_console(browser, console_node.http_url)
        wait_for(browser, lambda d: _depth(d, "orders") == "3")
        assert browser.title == "pylmq console"
        wait_text(browser, '[data-test="node-name"]', "nonode@nohost")
        # Auth is off: the page says so.
        assert by_test(browser, "auth-off-banner")[0].is_displayed()
        # The page polls: two more pushes show without a reload.
        client.push("orders", b"d")
        client.push("orders", b"e")
        wait_for(browser, lambda d: _depth(d, "orders") == "5")
    link = by_test(browser, "queue-link")[0]
    assert (link.text, link.get_attribute("href")) == (
        "orders",
        f"{console_node.http_url}/console/?poll=500#/queue/orders",
    )
    assert screenshot(browser, shots, "smoke-overview").stat().st_size > 0
