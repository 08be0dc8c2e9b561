"""With a token configured, the console asks for it before showing anything, refuses a wrong one,
keeps the right one in the tab's sessionStorage only, and the API refuses writes without it."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from pylmq.node.testing import NodeThread, local_options
from tests.console.browser import by_test, open_console, wait_for
from tests.console.overview_page import rows, text_of

TOKEN = "console-test-token-0123456789"


@pytest.fixture
def guarded_node() -> Iterator[NodeThread]:
    with NodeThread(local_options(rpc=None, http_tokens=(TOKEN,), http_protect="mutating")) as node:
        yield node


def _call(
    url: str, method: str = "GET", token: str | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, method=method, data=body)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def test_the_api_refuses_without_the_token_and_monitoring_stays_open(guarded_node: NodeThread) -> None:
    base = guarded_node.http_url
    status, headers = _call(f"{base}/console/api/overview")
    assert (status, headers.get("WWW-Authenticate")) == (401, 'Bearer realm="pylmq"')
    assert _call(f"{base}/console/api/overview", token="wrong-token-0123456789")[0] == 401
    assert _call(f"{base}/console/api/overview", token=TOKEN)[0] == 200
    assert _call(f"{base}/messages/jobs", "POST", body=b"x")[0] == 401
    assert _call(f"{base}/messages/jobs", "POST", token=TOKEN, body=b"x")[0] == 200
    assert _call(f"{base}/stats")[0] == 200  # read-only monitoring is open under "mutating"


def test_console_asks_for_the_token_refuses_a_wrong_one_and_forgets_it(
    browser: WebDriver, guarded_node: NodeThread
) -> None:
    base = guarded_node.http_url
    assert _call(f"{base}/messages/{quote('jobs')}", "POST", token=TOKEN, body=b"x")[0] == 200
    open_console(browser, base)
    # Nothing but the login: no table, no request that the node would refuse (a refused
    # request would be a SEVERE browser log entry, failing the test).
    wait_for(browser, lambda d: by_test(d, "login-form"))
    assert by_test(browser, "queue-table") == []
    assert browser.execute_script("return location.hash") == "#/login"
    assert not by_test(browser, "auth-off-banner")[0].is_displayed()
    assert by_test(browser, "nav-login")[0].is_displayed()

    by_test(browser, "login-token")[0].send_keys("wrong-token-0123456789")
    by_test(browser, "login-submit")[0].click()
    wait_for(browser, lambda d: by_test(d, "login-error")[0].is_displayed())
    assert "refused" in (text_of(browser, "login-error") or "")
    assert browser.execute_script("return sessionStorage.getItem('pylmq.token')") is None

    by_test(browser, "login-token")[0].send_keys(TOKEN)
    by_test(browser, "login-submit")[0].click()
    wait_for(browser, lambda d: ("jobs", "1", "jobs") in rows(d))
    assert browser.execute_script("return sessionStorage.getItem('pylmq.token')") == TOKEN
    assert browser.execute_script("return localStorage.length") == 0
    assert TOKEN not in browser.current_url

    # Forgetting it: the next visit of the overview asks again.
    by_test(browser, "nav-login")[0].click()
    wait_for(browser, lambda d: by_test(d, "login-forget"))
    by_test(browser, "login-forget")[0].click()
    wait_for(browser, lambda d: text_of(d, "login-status") == "Credential forgotten.")
    assert browser.execute_script("return sessionStorage.getItem('pylmq.token')") is None
    by_test(browser, "brand")[0].click()
    wait_for(browser, lambda d: d.execute_script("return location.hash") == "#/login" and by_test(d, "login-form"))
    assert by_test(browser, "queue-table") == []
