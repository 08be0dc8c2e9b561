"""Dead letters in a real browser: a message whose retries are spent shows on its dead-letter
queue's page with where it came from and why, and Requeue sends it back (work item D)."""

from __future__ import annotations

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, wait_for
from tests.console.test_browser_queue import fill, one, queue_route, text_of


def test_a_dead_letter_shows_its_origin_and_reason_and_requeue_sends_it_back(
    browser: WebDriver, console_node: NodeThread
) -> None:
    with HttpClient(console_node.http_url) as client:
        # retry 0 and a short timeout: the one delivery's deadline passes unanswered and the
        # message moves to work.dead (a nack would make it available again, not dead).
        client.update_props("work", {"retry": 0, "timeout": 0.2, "dead_letter": "work.dead"})
        client.push("work", "failed job")
        assert client.pull("work", timeout=1) is not None
        # A waiting pull outlives the deadline: the queue settles the message, nothing is left.
        assert client.pull("work", timeout=2) is None
        assert len(client.peek("work.dead")) == 1

        open_console(browser, console_node.http_url, queue_route("work"))
        text_of(browser, "queue-dlq-count", "1")

        # The origin queue's page links to its dead-letter queue with its count.
        one(browser, "queue-dlq-link").click()
        text_of(browser, "queue-name", "work.dead")
        wait_for(browser, lambda d: len(by_test(d, "peek-row")) == 1)
        row = by_test(browser, "peek-row")[0]
        assert row.find_element(By.CSS_SELECTOR, '[data-test="peek-origin"]').text == "work"
        assert row.find_element(By.CSS_SELECTOR, '[data-test="peek-reason"]').text == "retries"
        assert row.find_element(By.CSS_SELECTOR, '[data-test="peek-body"]').text == "failed job"

        fill(one(browser, "requeue-n"), "10")
        one(browser, "requeue-submit").click()
        text_of(browser, "requeue-result", "requeued 1")
        text_of(browser, "queue-depth", "0")
        wait_for(browser, lambda d: by_test(d, "peek-row") == [])
        assert client.peek("work.dead") == []
        back = client.peek("work", body=True)
        assert [(m["body"], m["attempts"], "dead" in m) for m in back] == [("failed job", 0, False)]
        client.update_props("work", {"timeout": 30})  # no second death while the page looks

        # And the origin's page shows it there again.
        open_console(browser, console_node.http_url, queue_route("work"))
        text_of(browser, "queue-depth", "1")
        text_of(browser, "queue-dlq-count", "0")


def test_a_queue_without_dead_letters_offers_no_requeue(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push("plain", "x")
        open_console(browser, console_node.http_url, queue_route("plain"))
        wait_for(browser, lambda d: len(by_test(d, "peek-row")) == 1)
        assert not one(browser, "requeue-panel").is_displayed()
        assert one(browser, "queue-dlq").text == "No dead-letter queue."
