"""Helpers of the console's browser tests: waits, the browser log, screenshots.

Every test reaches the browser through the session fixture ``chrome`` (conftest.py), the one
place a WebDriver is made: with the explicit Debian chromedriver, so Selenium Manager never
downloads anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

__all__ = ["WAIT", "by_test", "open_console", "screenshot", "severe_entries", "wait_for", "wait_text"]

WAIT = 10.0
"""Seconds a condition wait gives the page (2 busy cores; the page polls every 500 ms in tests)."""
POLL_MS = 500

T = TypeVar("T")


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], T], timeout: float = WAIT) -> T:
    """``condition`` once it returns something truthy (its value); TimeoutException after ``timeout``."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def by_test(driver: WebDriver | WebElement, name: str) -> list[WebElement]:
    """Elements with ``data-test="name"`` (the page's test hooks)."""
    return driver.find_elements(By.CSS_SELECTOR, f'[data-test="{name}"]')


def wait_text(driver: WebDriver, css: str, want: str, timeout: float = WAIT) -> WebElement:
    """The first element matching ``css`` once its text is ``want``."""

    def ready(d: WebDriver) -> WebElement | None:
        for el in d.find_elements(By.CSS_SELECTOR, css):
            if el.text == want:
                return el
        return None

    found = wait_for(driver, ready, timeout)
    assert found is not None  # until() returns only a truthy value
    return found


def open_console(driver: WebDriver, base_url: str, route: str = "/") -> None:
    """Load the console of the node at ``base_url`` on ``route`` (``/``, ``/queue/NAME``...),
    polling every :data:`POLL_MS` ms."""
    driver.get(f"{base_url}/console/?poll={POLL_MS}#{route}")


def severe_entries(driver: WebDriver) -> list[dict[str, Any]]:
    """The browser log's SEVERE entries since the last call (a JS error, a CSP violation, a
    failed request); reading the log empties it."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]  # untyped in selenium
    return [e for e in entries if e.get("level") == "SEVERE"]


def screenshot(driver: WebDriver, directory: Path, name: str) -> Path:
    """Save a PNG of the page as ``directory/name.png`` and say where."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    if not driver.save_screenshot(str(path)):
        raise AssertionError(f"the browser could not save a screenshot to {path}")
    print(f"screenshot: {path}")
    return path
