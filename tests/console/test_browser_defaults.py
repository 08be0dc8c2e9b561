"""The default props editor in a real browser (work item D): entries are added, moved and
saved with PUT /properties, and the API's refusal of a bad regex is shown, changing nothing."""

from __future__ import annotations

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, wait_for
from tests.console.test_browser_queue import expect_refusals, fill, one


def regexes(driver: WebDriver) -> list[str] | None:
    """The regexes the editor shows (None while it is being redrawn under the reader)."""
    try:
        return [str(e.get_attribute("value")) for e in by_test(driver, "defaults-regex")]
    except StaleElementReferenceException:
        return None


def test_add_move_and_save_default_props(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.set_default_props([("^old", {"timeout": 10})])
        open_console(browser, console_node.http_url, "/defaults")
        wait_for(browser, lambda d: regexes(d) == ["^old"])
        one(browser, "defaults-add").click()
        wait_for(browser, lambda d: len(by_test(d, "defaults-row")) == 2)
        row = by_test(browser, "defaults-row")[1]
        fill(row.find_element(By.CSS_SELECTOR, '[data-test="defaults-regex"]'), r"^tmp\.")
        fill(row.find_element(By.CSS_SELECTOR, '[data-test="defaults-retry"]'), "1")
        row.find_element(By.CSS_SELECTOR, '[data-test="defaults-up"]').click()  # first match wins
        wait_for(browser, lambda d: regexes(d) == [r"^tmp\.", "^old"])
        one(browser, "defaults-save").click()
        wait_for(browser, lambda d: one(d, "defaults-status").text == "saved")
        assert client.get_default_props() == [(r"^tmp\.", {"retry": 1}), ("^old", {"timeout": 10})]
        assert client.get_props("tmp.x")["retry"] == 1

        # Remove one and save: the list on the node follows.
        by_test(browser, "defaults-row")[1].find_element(By.CSS_SELECTOR, '[data-test="defaults-remove"]').click()
        wait_for(browser, lambda d: regexes(d) == [r"^tmp\."])
        one(browser, "defaults-save").click()
        wait_for(browser, lambda _: client.get_default_props() == [(r"^tmp\.", {"retry": 1})])
        wait_for(browser, lambda d: regexes(d) == [r"^tmp\."] and one(d, "defaults-status").text == "saved")


def test_a_bad_regex_shows_the_api_detail_and_changes_nothing(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.set_default_props([("^keep", {"retry": 3})])
        open_console(browser, console_node.http_url, "/defaults")
        wait_for(browser, lambda d: regexes(d) == ["^keep"])
        one(browser, "defaults-add").click()
        wait_for(browser, lambda d: len(by_test(d, "defaults-row")) == 2)
        fill(by_test(browser, "defaults-regex")[1], "(")
        one(browser, "defaults-save").click()
        wait_for(browser, lambda d: one(d, "defaults-status").get_attribute("data-state") == "error")
        assert one(browser, "defaults-status").text.startswith("invalid_regex: ")
        assert regexes(browser) == ["^keep", "("]  # the form keeps what was typed
        assert client.get_default_props() == [("^keep", {"retry": 3})]
        expect_refusals(browser, f"{console_node.http_url}/properties", 400)
