"""Red team: names, bodies, content types and props an attacker controls, shown by the console
in a real Chromium. Whatever they hold, the page shows them as text: no element of theirs may
appear (each payload would add one with an ``id`` starting ``pwn``) and nothing may be loaded
from them (an injected ``<img src=x>`` would be a 404, a SEVERE entry the fixture fails on)."""

from __future__ import annotations

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, wait_for
from tests.console.test_browser_queue import queue_route, text_of

NAME = "<img src=x id=pwn1>\"'&amp;</td><script id=pwn2>window.pwned=1</script>"
DLQ = "<svg id=pwn3 onload=window.pwned=1>"
BODY = "<img src=x id=pwn4><iframe id=pwn5 src=javascript:1>"
REGEX = "^<img src=x id=pwn6>$"


def injected(driver: WebDriver) -> object:
    return driver.execute_script("return [document.querySelectorAll('[id^=pwn]').length, window.pwned || 0]")


def test_attacker_text_is_shown_as_text_on_every_page(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.update_props(NAME, {"dead_letter": DLQ, "retry": 1})
        client.push(NAME, BODY, content_type="text/html; charset=utf-8")
        client.push(DLQ, BODY.encode() + b"\xff", content_type="<b id=pwn7>")
        client.set_default_props([(REGEX, {"retry": 3})])

        open_console(browser, console_node.http_url, "/")
        row = wait_for(browser, lambda d: [r for r in by_test(d, "queue-row") if r.get_attribute("data-queue") == NAME])
        assert row[0].find_element(By.CSS_SELECTOR, '[data-test="queue-link"]').text == NAME
        assert injected(browser) == [0, 0]

        open_console(browser, console_node.http_url, queue_route(NAME))
        text_of(browser, "queue-name", NAME)
        wait_for(browser, lambda d: [b.text for b in by_test(d, "peek-body")] == [BODY])
        wait_for(browser, lambda d: [a.text for a in by_test(d, "queue-dlq-link")] == [DLQ])
        assert injected(browser) == [0, 0]

        open_console(browser, console_node.http_url, queue_route(DLQ))
        text_of(browser, "queue-name", DLQ)
        wait_for(browser, lambda d: len(by_test(d, "peek-body")) == 1)
        assert "<b id=pwn7>" in browser.find_element(By.CSS_SELECTOR, '[data-test="peek-rows"]').text
        assert injected(browser) == [0, 0]

        open_console(browser, console_node.http_url, "/defaults")
        regex = wait_for(browser, lambda d: by_test(d, "defaults-regex"))
        assert regex[0].get_attribute("value") == REGEX
        assert injected(browser) == [0, 0]
