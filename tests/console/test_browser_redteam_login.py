"""Red team, the login page: a token pasted with a character no HTTP header can carry (an
en dash, a non-breaking space from a chat or a PDF) must get a clear refusal, not be kept:
the browser's fetch throws on such a header value before sending anything, so a kept token
broke every later request of the tab, the page's own boot included (a reload showed only a
TypeError, no login page), until the tab was closed."""

from __future__ import annotations

from selenium.webdriver.chrome.webdriver import WebDriver

from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, wait_for
from tests.console.overview_page import rows, text_of
from tests.console.test_browser_auth import TOKEN, _call, guarded_node

__all__ = ["guarded_node"]  # the fixture, used here


def test_a_token_no_header_can_carry_is_refused_and_not_kept(browser: WebDriver, guarded_node: NodeThread) -> None:
    base = guarded_node.http_url
    assert _call(f"{base}/messages/jobs", "POST", token=TOKEN, body=b"x")[0] == 200
    open_console(browser, base)
    wait_for(browser, lambda d: by_test(d, "login-form"))
    by_test(browser, "login-token")[0].send_keys("console\u2013test\u00a0token\u20ac0123456789")
    by_test(browser, "login-submit")[0].click()
    wait_for(browser, lambda d: by_test(d, "login-error")[0].is_displayed())
    assert "A-Z" in (text_of(browser, "login-error") or "")
    assert browser.execute_script("return sessionStorage.getItem('pylmq.token')") is None
    # A reload of the tab still boots to the login, and the right token still logs in.
    browser.refresh()
    wait_for(browser, lambda d: by_test(d, "login-form"))
    assert not by_test(browser, "error-banner")[0].is_displayed()
    by_test(browser, "login-token")[0].send_keys(TOKEN)
    by_test(browser, "login-submit")[0].click()
    wait_for(browser, lambda d: ("jobs", "1", "jobs") in rows(d))
