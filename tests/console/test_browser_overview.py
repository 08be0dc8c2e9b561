"""The overview page in a real browser: queue depths live from the API, the totals, sorting, the
cluster panel of a standalone node, the auth-off banner, and the node's rate chart."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.action_chains import ActionChains

from pylmq.client import HttpClient
from pylmq.errors import ClusterUnavailable
from pylmq.node.testing import NodeThread
from tests.console.browser import by_test, open_console, screenshot, wait_for
from tests.console.overview_page import attr_of, rows, text_of


def _depth(driver: WebDriver, queue: str) -> str | None:
    return next((size for name, size, _ in rows(driver) if name == queue), None)


def test_overview_shows_depths_live_totals_and_that_auth_is_off(
    browser: WebDriver, console_node: NodeThread, shots: Path
) -> None:
    with HttpClient(console_node.http_url) as client:
        for body in (b"a", b"b", b"c"):
            client.push("orders", body)
        open_console(browser, console_node.http_url)
        wait_for(browser, lambda d: _depth(d, "orders") == "3")
        assert (text_of(browser, "totals-queues"), text_of(browser, "totals-messages")) == ("1", "3")
        assert by_test(browser, "auth-off-banner")[0].is_displayed()
        assert not by_test(browser, "nav-login")[0].is_displayed()  # nothing to log in to
        client.push("orders", b"d")
        client.push("orders", b"e")
        wait_for(browser, lambda d: _depth(d, "orders") == "5" and text_of(d, "totals-messages") == "5")
    assert by_test(browser, "error-banner")[0].is_displayed() is False
    assert screenshot(browser, shots, "overview").stat().st_size > 0


def test_cluster_panel_of_a_standalone_node(browser: WebDriver, console_node: NodeThread) -> None:
    open_console(browser, console_node.http_url)
    wait_for(browser, lambda d: text_of(d, "cluster-store") == "memory")
    assert text_of(browser, "cluster-self-runtime") == "python"
    assert text_of(browser, "cluster-mode") == "standalone node"
    (node,) = by_test(browser, "cluster-node")
    assert node.get_attribute("data-node") == "nonode@nohost"
    assert node.get_attribute("data-state") == "active"
    assert "stalled" not in (node.get_attribute("class") or "")
    assert text_of(browser, "cluster-runtime") == "python"
    assert by_test(browser, "cluster-stalled") == []


def test_sorting_by_a_column_and_back(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        for queue, n in (("a", 1), ("b", 3), ("c", 2)):
            for i in range(n):
                client.push(queue, f"{i}")
    open_console(browser, console_node.http_url)

    def order(d: WebDriver) -> list[str]:
        return [name for name, _, _ in rows(d)]

    wait_for(browser, lambda d: order(d) == ["a", "b", "c"])
    by_test(browser, "sort-size")[0].click()  # a new numeric column: largest first
    wait_for(browser, lambda d: order(d) == ["b", "c", "a"])
    by_test(browser, "sort-size")[0].click()  # the same column again: flipped
    wait_for(browser, lambda d: order(d) == ["a", "c", "b"])
    by_test(browser, "sort-name")[0].click()
    wait_for(browser, lambda d: order(d) == ["a", "b", "c"])


def test_the_node_chart_draws_pushes_from_the_rate_history(
    browser: WebDriver, console_node: NodeThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pylmq.access")
    open_console(browser, console_node.http_url)
    # The node's history has its first sample (the base its deltas count from).
    wait_for(browser, lambda d: int(attr_of(d, "chart-push", "data-count") or "0") >= 1)
    assert float(attr_of(browser, "chart-push", "data-max") or "0") == 0
    with HttpClient(console_node.http_url) as client:
        for i in range(200):
            client.push("busy", f"{i}")

    def peak(d: WebDriver) -> float:
        return float(attr_of(d, "chart-push", "data-max") or "0")

    wait_for(browser, lambda d: peak(d) > 0)
    # Points come in by `since`: each poll adds only newer ones, none twice.
    xs = (attr_of(browser, "chart-push", "points") or "").split()
    assert len(xs) == len({p.split(",")[0] for p in xs}) > 0
    # The page asked for the whole history once, then only for points after the last it had.
    targets = [r.getMessage().split()[1] for r in caplog.records if "/console/api/overview" in r.getMessage()]
    since = [int(parse_qs(urlsplit(t).query).get("since", ["-1"])[0]) for t in targets]
    assert since[0] == -1
    assert since[1:] == sorted(since[1:]) and since[-1] >= 1
    # Hovering the chart reads the values out at the nearest point.
    ActionChains(browser).move_to_element(by_test(browser, "chart")[0]).perform()
    wait_for(
        browser,
        lambda d: re.fullmatch(r"\d\d:\d\d:\d\d UTC: push [\d.]+/s, pull [\d.]+/s", text_of(d, "chart-readout") or ""),
    )


def test_overview_says_why_an_unavailable_node_lists_no_queues(browser: WebDriver, console_node: NodeThread) -> None:
    with HttpClient(console_node.http_url) as client:
        client.push("orders", b"x")
    open_console(browser, console_node.http_url)
    wait_for(browser, lambda d: rows(d) == [("orders", "1", "orders")])
    console_node.node.manager.unavailable = ClusterUnavailable("rejoining the cluster")
    wait_for(browser, lambda d: by_test(d, "overview-unavailable")[0].is_displayed())
    assert text_of(browser, "overview-unavailable") == "The node cannot serve queues now: rejoining the cluster"
    assert rows(browser) == []
    assert text_of(browser, "cluster-store") == "memory"  # the cluster panel still says where it stands
    console_node.node.manager.unavailable = None
    wait_for(browser, lambda d: rows(d) == [("orders", "1", "orders")])
    assert not by_test(browser, "overview-unavailable")[0].is_displayed()


def test_cluster_panel_highlights_a_stalled_peer_and_shows_the_mode(
    browser: WebDriver, console_node: NodeThread
) -> None:
    # The node's cluster view as a joined node would give it (the cluster's own tests check the
    # real one): an Erlang peer that stopped answering and a Python peer.
    view = {
        "node": "py@host",
        "runtime": "python",
        "store": "memory",
        "mode": "standalone",
        "mode_detail": "no running Mnesia node reachable",
        "nodes": [
            {"name": "py@host", "runtime": "python", "self": True, "state": "active", "silent_for": None},
            {"name": "lmq1@host", "runtime": "erlang", "self": False, "state": "stalled", "silent_for": 4.2},
            {"name": "py2@host", "runtime": "python", "self": False, "state": "active", "silent_for": 0.3},
        ],
    }
    web = console_node.node.web
    assert web is not None
    web.cluster_view = lambda: view
    open_console(browser, console_node.http_url)
    wait_for(browser, lambda d: len(by_test(d, "cluster-node")) == 3)
    states = browser.execute_script(
        "return [...document.querySelectorAll('[data-test=cluster-node]')].map((r) => "
        "[r.dataset.node, r.querySelector('[data-test=cluster-runtime]').textContent, r.className, "
        "r.querySelector('[data-test=cluster-silent]').textContent])"
    )
    assert states == [
        ["py@host", "python", "", "—"],
        ["lmq1@host", "erlang", "stalled", "4.2 s"],
        ["py2@host", "python", "", "0.3 s"],
    ]
    assert text_of(browser, "cluster-stalled") == "1 node stalled"
    mode = "cut off from the cluster: serving alone: no running Mnesia node reachable"
    assert text_of(browser, "cluster-mode") == mode
    assert "warn" in (attr_of(browser, "cluster-mode", "class") or "")
