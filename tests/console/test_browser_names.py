"""A queue name made to look like HTML, a path and a URL is shown as exact text everywhere on the
overview (no element is made from it) and links to its page, encoded as one route segment."""

from __future__ import annotations

from urllib.parse import quote

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.console.browser import open_console, wait_for
from tests.console.overview_page import rows

NASTY = '<img src=x onerror=alert(1)> a/b%2F?#ü "q"'


def test_a_nasty_name_is_text_and_routes_to_its_page(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push(NASTY, b"one")
        client.push(NASTY, b"two")
        client.push("plain", b"x")
    open_console(browser, console_node.http_url)
    wait_for(browser, lambda d: (NASTY, "2", NASTY) in rows(d))
    # The name was never parsed as markup: no image, no script, and no alert opened (Selenium
    # would raise UnexpectedAlertPresentException on the next command).
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert browser.execute_script("return document.querySelectorAll('[onerror]').length") == 0
    # Filtering by a piece of it (sent as a query parameter) finds it alone.
    browser.find_element(By.CSS_SELECTOR, '[data-test="queue-filter"]').send_keys("%2F?#ü")
    wait_for(browser, lambda d: [name for name, _, _ in rows(d)] == [NASTY])
    route = "#/queue/" + quote(NASTY, safe="!'()*-._~")  # encodeURIComponent's safe set
    links = browser.find_elements(By.CSS_SELECTOR, '[data-test="queue-link"]')
    link = next(a for a in links if a.text == NASTY)
    assert (link.get_attribute("href") or "").endswith("/console/?poll=500" + route)
    link.click()
    wait_for(browser, lambda d: d.execute_script("return location.hash") == route)
