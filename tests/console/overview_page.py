"""Reading the overview page (work item C's hooks) in one script call, so a poll that redraws the
rows between two Selenium calls never leaves a test holding a stale element."""

from __future__ import annotations

from typing import Any, cast

from selenium.webdriver.chrome.webdriver import WebDriver

__all__ = ["attr_of", "rows", "text_of"]

_ROWS = """
return [...document.querySelectorAll('[data-test="queue-row"]')].map((r) => [
  r.dataset.queue,
  r.querySelector('[data-test="queue-size"]').textContent,
  r.querySelector('[data-test="queue-link"]').textContent,
]);
"""


def rows(driver: WebDriver) -> list[tuple[str, str, str]]:
    """The queue table's rows now: (data-queue, depth text, link text) each."""
    got = cast(list[list[str]], driver.execute_script(_ROWS))
    return [(r[0], r[1], r[2]) for r in got]


def text_of(driver: WebDriver, name: str) -> str | None:
    """The text of the first ``data-test=name`` element (None when there is none)."""
    got: Any = driver.execute_script(
        'const e = document.querySelector(`[data-test="${arguments[0]}"]`); return e ? e.textContent : null;', name
    )
    return cast(str | None, got)


def attr_of(driver: WebDriver, name: str, attr: str) -> str | None:
    """An attribute of the first ``data-test=name`` element (None when there is none)."""
    got: Any = driver.execute_script(
        'const e = document.querySelector(`[data-test="${arguments[0]}"]`);'
        "return e ? e.getAttribute(arguments[1]) : null;",
        name,
        attr,
    )
    return cast(str | None, got)
