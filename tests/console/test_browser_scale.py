"""The overview with 10,000 queues: one page of 50 rows, paging, the name filter and a sort, all
done by the node (the page never holds more than a page of rows)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread, local_options
from tests.console.browser import by_test, open_console, wait_for
from tests.console.overview_page import rows, text_of

QUEUES = 10_000


@pytest.fixture
def crowded_node() -> Iterator[NodeThread]:
    with NodeThread(local_options(rpc=None)) as node:
        manager = node.node.manager

        async def create() -> None:
            for i in range(QUEUES):
                await manager.ensure(f"q-{i:05d}")

        node.call(create(), timeout=120)
        yield node


def _names(driver: WebDriver) -> list[str]:
    return [name for name, _, _ in rows(driver)]


def test_ten_thousand_queues_page_filter_sort_and_open(browser: WebDriver, crowded_node: NodeThread) -> None:
    with HttpClient(crowded_node.http_url) as client:
        for body in ("x", "y", "z"):
            client.push("q-04242", body)
    open_console(browser, crowded_node.http_url)
    wait_for(browser, lambda d: text_of(d, "totals-queues") == "10,000", timeout=30)
    wait_for(browser, lambda d: len(_names(d)) == 50)
    names = _names(browser)
    assert names == [f"q-{i:05d}" for i in range(50)]
    assert text_of(browser, "pager-range") == "1–50 of 10,000"

    by_test(browser, "pager-next")[0].click()
    wait_for(browser, lambda d: _names(d)[:1] == ["q-00050"])
    assert _names(browser) == [f"q-{i:05d}" for i in range(50, 100)]
    assert text_of(browser, "pager-range") == "51–100 of 10,000"

    by_test(browser, "sort-size")[0].click()  # deepest first, back to the first page
    wait_for(browser, lambda d: _names(d)[:2] == ["q-04242", "q-00000"])
    assert text_of(browser, "pager-range") == "1–50 of 10,000"

    by_test(browser, "queue-filter")[0].send_keys("Q-09999")  # case-insensitive substring
    wait_for(browser, lambda d: _names(d) == ["q-09999"])
    assert text_of(browser, "pager-range") == "1–1 of 1"
    assert text_of(browser, "queue-matched") == "1 of 10,000 queues match"

    by_test(browser, "queue-link")[0].click()
    wait_for(browser, lambda d: d.execute_script("return location.hash") == "#/queue/q-09999")
