"""The queue page in a real browser: push, peek, props, purge and delete (work item D).

Each test drives the page as an operator would and checks the outcome over the HTTP API (the
node is the truth, not the page). Expected API refusals (a 400 the page shows) are logged by
Chromium as SEVERE "Failed to load resource" entries: :func:`expect_refusals` takes exactly
those (URL and status) off the log, so that any other SEVERE entry still fails the test.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from pylmq.api import peek as peek_module
from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread, local_options
from tests.console.browser import by_test, open_console, screenshot, severe_entries, wait_for


def queue_route(name: str) -> str:
    """The page's route for a queue (encodeURIComponent's escaping)."""
    return "/queue/" + quote(name, safe="-_.!~*'()")


def one(driver: WebDriver | WebElement, name: str) -> WebElement:
    """The single element with ``data-test=name`` once there is one."""
    found = wait_for(driver, lambda _: by_test(driver, name))  # type: ignore[arg-type]
    assert len(found) == 1, f"{len(found)} elements {name!r}"
    return found[0]


def texts(driver: WebDriver, name: str) -> list[str] | None:
    """The texts of the ``data-test=name`` elements (None while the page redraws them: the
    queue page redraws parts of itself at every poll)."""
    try:
        return [str(e.text) for e in by_test(driver, name)]
    except StaleElementReferenceException:
        return None


def text_of(driver: WebDriver, name: str, want: str) -> None:
    """Wait until the single ``data-test=name`` element shows ``want``."""
    wait_for(driver, lambda d: texts(d, name) == [want])


def fill(el: WebElement, text: str) -> None:
    el.clear()
    el.send_keys(text)


def expect_refusals(driver: WebDriver, url: str, status: int) -> None:
    """Take the browser's SEVERE entries for the refused request ``url`` (status ``status``)
    off the log: there must be at least one and nothing else may be SEVERE."""
    entries = severe_entries(driver)
    want = f"{url} - Failed to load resource: the server responded with a status of {status}"
    expected = [e for e in entries if str(e.get("message", "")).startswith(want)]
    others = [e for e in entries if e not in expected]
    assert expected, f"no refusal of {url} logged: {entries}"
    assert not others, f"the browser logged errors: {others}"


def test_push_from_the_page_moves_the_depth(browser: WebDriver, console_node: NodeThread, shots: Path) -> None:
    with HttpClient(console_node.http_url) as client:
        client.update_props("jobs", {"retry": 2})  # the queue exists, empty
        open_console(browser, console_node.http_url, queue_route("jobs"))
        text_of(browser, "queue-name", "jobs")
        text_of(browser, "queue-depth", "0")
        fill(one(browser, "push-body"), "hello from the console")
        one(browser, "push-submit").click()
        text_of(browser, "queue-depth", "1")
        assert one(browser, "push-result").text.startswith("pushed: ")
        msg = client.pull("jobs", timeout=1)
        assert msg is not None
        assert msg.body == b"hello from the console"
        assert msg.content_type == "text/plain; charset=utf-8"
        screenshot(browser, shots, "queue")


def test_the_queue_chart_draws_its_own_pushes(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push("busy", "0")
        client.update_props("idle", {"retry": 1})  # a queue with no traffic at all
        open_console(browser, console_node.http_url, queue_route("busy"))
        # The history has its first sample (the base its deltas count from).
        wait_for(browser, lambda d: int(chart_attr(d, "data-count") or "0") >= 1)
        for i in range(100):
            client.push("busy", str(i))
        wait_for(browser, lambda d: float(chart_attr(d, "data-max") or "0") > 0)
        assert not one(browser, "queue-chart-untracked").is_displayed()
        # The idle queue's page draws its own rates, zeros, not the node's.
        open_console(browser, console_node.http_url, queue_route("idle"))
        text_of(browser, "queue-name", "idle")
        wait_for(browser, lambda d: int(chart_attr(d, "data-count") or "0") >= 2)
        assert float(chart_attr(browser, "data-max") or "0") == 0


def chart_attr(driver: WebDriver, attr: str) -> str | None:
    """An attribute of the queue chart's push line (None while it is redrawn)."""
    try:
        lines = driver.find_elements(By.CSS_SELECTOR, '[data-test="queue-chart"] [data-test="chart-push"]')
        return lines[0].get_attribute(attr) if lines else None
    except StaleElementReferenceException:
        return None


def test_a_bad_push_option_shows_the_api_detail_and_pushes_nothing(
    browser: WebDriver, console_node: NodeThread
) -> None:
    with HttpClient(console_node.http_url) as client:
        client.update_props("opts", {"retry": 2})
        open_console(browser, console_node.http_url, queue_route("opts"))
        fill(one(browser, "push-body"), "x")
        fill(one(browser, "push-opt-priority"), "300")
        one(browser, "push-submit").click()
        wait_for(browser, lambda d: one(d, "push-result").text.startswith("invalid_options: "))
        assert "priority" in one(browser, "push-result").text
        expect_refusals(browser, f"{console_node.http_url}/messages/opts?priority=300", 400)
        assert client.peek("opts") == []


def peek_rows(driver: WebDriver) -> list[WebElement]:
    return by_test(driver, "peek-row")


def peek_ids(driver: WebDriver) -> list[str] | None:
    """The ids the peek list shows (None while it is being redrawn under the reader)."""
    try:
        return [str(r.get_attribute("data-id")) for r in peek_rows(driver)]
    except StaleElementReferenceException:
        return None


def peek_body(driver: WebDriver, i: int) -> str | None:
    """The body text of the i-th peek row (None while the list is being redrawn)."""
    try:
        return str(peek_rows(driver)[i].find_element(By.CSS_SELECTOR, '[data-test="peek-body"]').text)
    except (StaleElementReferenceException, IndexError):
        return None


def test_peek_shows_text_binary_and_compound_bodies_page_by_page(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push("mixed", "plain text <b>not bold</b>", "text/plain")
        client.push("mixed", bytes([0xFF, 0x00, 0xFE]), "application/octet-stream")
        client.push("mixed", "third", "text/plain")
        client.update_props("acc", {"accum": 60})  # compound: two pushes in one record
        client.push("acc", "part one", "text/plain")
        client.push("acc", "part two", "text/x-two")
        open_console(browser, console_node.http_url, queue_route("mixed"))
        wait_for(browser, lambda d: len(peek_rows(d)) == 3)
        rows = peek_rows(browser)
        assert [r.find_element(By.CSS_SELECTOR, '[data-test="peek-type"]').text for r in rows] == [
            "text/plain",
            "application/octet-stream",
            "text/plain",
        ]
        # The text body is text in a <pre>, never markup.
        first = rows[0].find_element(By.CSS_SELECTOR, '[data-test="peek-body"]')
        assert (first.tag_name, first.text) == ("pre", "plain text <b>not bold</b>")
        assert not rows[0].find_elements(By.TAG_NAME, "b")
        # The binary one is a base64 note with its decoded size.
        assert rows[1].find_element(By.CSS_SELECTOR, '[data-test="peek-binary"]').text.startswith("binary, 3 bytes")
        assert rows[1].find_element(By.CSS_SELECTOR, '[data-test="peek-body"]').text == "/wD+"

        # Pages of 2: the third message is on page 2, and back.
        fill(one(browser, "peek-size"), "2")
        one(browser, "peek-refresh").click()  # the size applies (change) and the list reloads
        wait_for(browser, lambda d: len(peek_rows(d)) == 2)
        ids = [m["id"] for m in client.peek("mixed")]
        wait_for(browser, lambda d: peek_ids(d) == ids[:2])
        one(browser, "peek-next").click()
        wait_for(browser, lambda d: peek_ids(d) == ids[2:])
        assert one(browser, "peek-range").text == "3–3"
        assert one(browser, "peek-next").get_attribute("disabled") is not None
        one(browser, "peek-prev").click()
        wait_for(browser, lambda d: peek_ids(d) == ids[:2])

        # The compound record lists its parts, each with its content type.
        open_console(browser, console_node.http_url, queue_route("acc"))
        wait_for(browser, lambda d: len(by_test(d, "peek-part")) == 2)
        parts = by_test(browser, "peek-part")
        assert [p.find_element(By.CSS_SELECTOR, '[data-test="peek-body"]').text for p in parts] == [
            "part one",
            "part two",
        ]
        assert "text/x-two" in parts[1].text


def test_peek_cuts_long_bodies_and_shows_the_whole_one_on_demand(browser: WebDriver, console_node: NodeThread) -> None:
    long = "x" * 600 + "END"
    with HttpClient(console_node.http_url) as client:
        client.push("long", "short", "text/plain")
        client.push("long", long, "text/plain")
        open_console(browser, console_node.http_url, queue_route("long"))
        wait_for(browser, lambda d: len(peek_rows(d)) == 2)
        row = peek_rows(browser)[1]
        assert row.find_element(By.CSS_SELECTOR, '[data-test="peek-body"]').text == "x" * 512
        assert "first 512 bytes" in row.find_element(By.CSS_SELECTOR, '[data-test="peek-truncated"]').text
        assert not peek_rows(browser)[0].find_elements(By.CSS_SELECTOR, '[data-test="peek-whole"]')
        row.find_element(By.CSS_SELECTOR, '[data-test="peek-whole"]').click()
        wait_for(browser, lambda d: peek_body(d, 1) == long)
        assert not peek_rows(browser)[1].find_elements(By.CSS_SELECTOR, '[data-test="peek-truncated"]')


def test_peek_starts_again_when_the_page_s_anchor_left_the_queue(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        for body in ("a", "b", "c"):
            client.push("moving", body)
        first_id = client.peek("moving")[0]["id"]
        open_console(browser, console_node.http_url, queue_route("moving"))
        wait_for(browser, lambda d: len(peek_rows(d)) == 3)
        fill(one(browser, "peek-size"), "1")
        one(browser, "peek-refresh").click()
        wait_for(browser, lambda d: [peek_body(d, i) for i in range(len(peek_rows(d)))] == ["a"])
        one(browser, "peek-next").click()
        wait_for(browser, lambda d: peek_body(d, 0) == "b")
        # "a" (page 2 starts after it) is consumed over the API: the page's anchor is gone.
        msg = client.pull("moving", timeout=1)
        assert msg is not None and msg.body == b"a"
        client.ack("moving", msg.id)
        one(browser, "peek-refresh").click()
        wait_for(browser, lambda d: "back to the first page" in (texts(d, "peek-note") or [""])[0])
        wait_for(browser, lambda d: peek_body(d, 0) == "b")
        assert one(browser, "peek-range").text == "1–1"
        assert one(browser, "peek-prev").get_attribute("disabled") is not None
        expect_refusals(browser, f"{console_node.http_url}/peek/moving?after={first_id}&n=1&body=1&preview=512", 404)


def test_props_edit_saves_and_a_bad_value_shows_the_api_detail(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.update_props("props", {"timeout": 30})
        before = client.get_props("props")
        open_console(browser, console_node.http_url, queue_route("props"))
        wait_for(browser, lambda d: one(d, "props-input-retry").get_attribute("value") == str(before["retry"]))
        fill(one(browser, "props-input-retry"), "5")
        one(browser, "props-save").click()
        text_of(browser, "props-status", "saved")
        assert client.get_props("props") == {**before, "retry": 5}
        text_of(browser, "props-value-retry", "5")

        fill(one(browser, "props-input-timeout"), "-1")
        one(browser, "props-save").click()
        wait_for(browser, lambda d: one(d, "props-status").get_attribute("data-state") == "error")
        shown = one(browser, "props-status").text
        assert shown.startswith("invalid_props: ") and "timeout" in shown, shown
        assert client.get_props("props") == {**before, "retry": 5}  # nothing changed
        expect_refusals(browser, f"{console_node.http_url}/properties/props", 400)


def test_purge_asks_first_then_empties_the_queue_and_keeps_its_props(
    browser: WebDriver, console_node: NodeThread
) -> None:
    with HttpClient(console_node.http_url) as client:
        client.update_props("old", {"retry": 7})
        for body in ("a", "b", "c"):
            client.push("old", body)
        open_console(browser, console_node.http_url, queue_route("old"))
        text_of(browser, "queue-depth", "3")
        one(browser, "queue-purge").click()
        assert "Purge old?" in one(browser, "confirm-text").text
        one(browser, "confirm-cancel").click()
        assert client.peek("old") != [] and len(client.peek("old")) == 3
        text_of(browser, "queue-depth", "3")
        one(browser, "queue-purge").click()
        one(browser, "confirm-ok").click()
        text_of(browser, "queue-status", "purged 3")
        text_of(browser, "queue-depth", "0")
        assert client.peek("old") == []
        assert client.get_props("old")["retry"] == 7


def test_delete_needs_the_name_typed_then_goes_back_to_the_overview(
    browser: WebDriver, console_node: NodeThread
) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push("doomed", "x")
        client.push("kept", "y")
        open_console(browser, console_node.http_url, queue_route("doomed"))
        text_of(browser, "queue-depth", "1")
        one(browser, "queue-delete").click()
        ok = one(browser, "confirm-ok")
        assert ok.get_attribute("disabled") is not None
        fill(one(browser, "confirm-input"), "doome")
        assert ok.get_attribute("disabled") is not None
        one(browser, "confirm-input").send_keys("d")
        wait_for(browser, lambda _: ok.get_attribute("disabled") is None)
        ok.click()
        wait_for(browser, lambda d: d.current_url.endswith("#/"))
        wait_for(browser, lambda d: overview_queues(d) == ["kept"])
    assert console_status(console_node, "/console/api/queue/doomed") == 404  # gone, not recreated


def overview_queues(driver: WebDriver) -> list[str] | None:
    """The queues of the overview's rows (None while a poll redraws them)."""
    try:
        return [str(r.get_attribute("data-queue")) for r in by_test(driver, "queue-row")]
    except StaleElementReferenceException:
        return None


NASTY = "<i>x</i> a/b%2F?q=1#frag ü"


def test_a_queue_name_with_url_and_html_characters_works_on_its_page(
    browser: WebDriver, console_node: NodeThread
) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push(NASTY, "first")
        open_console(browser, console_node.http_url, queue_route(NASTY))
        text_of(browser, "queue-name", NASTY)
        text_of(browser, "queue-depth", "1")
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-test="view"] i')  # text, not markup
        wait_for(browser, lambda d: peek_body(d, 0) == "first")
        fill(one(browser, "push-body"), "second")
        one(browser, "push-submit").click()
        text_of(browser, "queue-depth", "2")
        fill(one(browser, "props-input-retry"), "4")
        one(browser, "props-save").click()
        text_of(browser, "props-status", "saved")
        assert client.get_props(NASTY)["retry"] == 4
        assert [m["body"] for m in client.peek(NASTY, body=True)] == ["first", "second"]


TOKEN = "queue-page-token-0123456789"


def test_with_a_credential_the_queue_page_s_actions_send_it(browser: WebDriver) -> None:
    guarded = NodeThread(local_options(rpc=None, http_tokens=(TOKEN,), http_protect="all"))
    with guarded as node, HttpClient(node.http_url, token=TOKEN) as client:
        client.update_props("locked", {"retry": 2})
        client.push("locked", "one")
        # The tab holds the token when the console boots (as after a login on #/login).
        open_console(browser, node.http_url, "/login")
        # Once the login page is up: a token stored while the boot still asks the node would be
        # met by its "no credential" answer, which sends the next route back to the login.
        wait_for(browser, lambda d: by_test(d, "login-form"))
        browser.execute_script("sessionStorage.setItem('pylmq.token', arguments[0])", TOKEN)
        browser.get("about:blank")  # a whole new load of the console, not a change of its hash
        open_console(browser, node.http_url, queue_route("locked"))
        text_of(browser, "queue-depth", "1")
        wait_for(browser, lambda d: peek_body(d, 0) == "one")  # peek is guarded: it sent the token
        fill(one(browser, "push-body"), "two")
        one(browser, "push-submit").click()
        text_of(browser, "queue-depth", "2")
        fill(one(browser, "props-input-retry"), "6")
        one(browser, "props-save").click()
        text_of(browser, "props-status", "saved")
        one(browser, "queue-purge").click()
        one(browser, "confirm-ok").click()
        text_of(browser, "queue-status", "purged 2")
        assert client.peek("locked") == [] and client.get_props("locked")["retry"] == 6


def console_status(node: NodeThread, path: str) -> int:
    """The HTTP status of a GET of ``path`` on the node."""
    try:
        with urllib.request.urlopen(node.http_url + path, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_peek_walks_on_past_a_page_the_api_cut_by_bytes(
    browser: WebDriver, console_node: NodeThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two 512-byte previews fill the node's (shrunk) page budget: pages of 2 where 20 are asked.
    monkeypatch.setattr(peek_module, "MAX_PEEK_BYTES", 1800)
    with HttpClient(console_node.http_url) as client:
        for i in range(5):
            client.push("cutq", f"{i}" * 600, "text/plain")
        ids = [m["id"] for m in client.peek("cutq")]
        open_console(browser, console_node.http_url, queue_route("cutq"))
        wait_for(browser, lambda d: peek_ids(d) == ids[:2])
        assert one(browser, "peek-range").text == "1–2"
        one(browser, "peek-next").click()  # short but cut: not the last page
        wait_for(browser, lambda d: peek_ids(d) == ids[2:4])
        assert one(browser, "peek-range").text == "3–4"
        one(browser, "peek-next").click()
        wait_for(browser, lambda d: peek_ids(d) == ids[4:])
        assert one(browser, "peek-range").text == "5–5"
        assert one(browser, "peek-next").get_attribute("disabled") is not None
        one(browser, "peek-prev").click()
        wait_for(browser, lambda d: peek_ids(d) == ids[2:4])
        assert one(browser, "peek-range").text == "3–4"
