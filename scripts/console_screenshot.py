"""Screenshots of the web console for the docs: ``docs/console.png`` and ``docs/console-queue.png``.

Starts a memory-store node in this process (as the browser tests do), creates a few demo queues
and a dead-letter queue, runs push/pull traffic for a few seconds so the rate charts have points,
and saves 1366x900 PNGs of the overview and of one queue's page through Debian's headless
chromium and chromedriver (the same binaries as tests/console; ``make test`` installs them).

Run by hand from the checkout, then commit the PNGs::

    PYTHONPATH=$PWD python scripts/console_screenshot.py [--out docs] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread, local_options

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1366, 900
QUEUE_PAGE = "orders"


def demo_queues(client: HttpClient) -> None:
    """A handful of queues an operator might have, one with a dead-letter queue holding two."""
    client.set_default_props([("^events\\.", {"accum": 0.5})])
    client.update_props("orders", {"retry": 5, "timeout": 30, "dead_letter": "orders.dead"})
    client.update_props("work", {"retry": 0, "timeout": 0.2, "dead_letter": "work.dead"})
    client.push_many("reports", [f"report {i}" for i in range(12)])
    client.push("orders", b'{"order": 1041, "sku": "A-17", "qty": 2}', "application/json")
    for body in ("resize image 8812", "resize image 8813"):
        client.push("work", body)
        assert client.pull("work", timeout=1) is not None  # delivered, never answered
    # A waiting pull outlives the 0.2-s deadlines: the queue settles both into work.dead.
    assert client.pull("work", timeout=1) is None
    client.push("events.clicks", "click 1")
    client.push("events.clicks", "click 2")  # accumulated into one compound message


def traffic(url: str, stop: threading.Event) -> None:
    """Steady pushes and most of them pulled and acked, so depth and both rates move."""
    with HttpClient(url) as client:
        n = 0
        while not stop.is_set():
            n += 1
            client.push_many("orders", [(None, f'{{"order": {2000 + n * 10 + i}}}') for i in range(9)])
            client.push_many("emails", [f"mail {n}.{i}" for i in range(4)])
            client.push("payments", f"payment {n}")
            for msg in client.pull_many("orders", 7, timeout=0):
                client.ack("orders", msg.id)
            for msg in client.pull_many("emails", 4, timeout=0):
                client.ack("emails", msg.id)
            stop.wait(0.05 + 0.01 * (n % 16))  # a varying pace: the chart is not a flat line


def browser(profile: Path) -> webdriver.Chrome:
    os.environ["SE_OFFLINE"] = "true"  # the explicit driver below: Selenium Manager stays off-line
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(arg)
    opts.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    opts.add_argument("--lang=en-US")
    opts.add_argument(f"--user-data-dir={profile}")
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # chromium refuses to run as root with its sandbox
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    # --window-size counts the window, not the page: pin the viewport itself to the PNG's size.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    return driver


def shoot(driver: webdriver.Chrome, url: str, ready_css: str, path: Path) -> None:
    driver.get(url)
    WebDriverWait(driver, 15).until(lambda d: d.find_elements(By.CSS_SELECTOR, ready_css))
    time.sleep(1.5)  # one more poll: the chart and the counters settle before the picture
    if not driver.save_screenshot(str(path)):
        raise SystemExit(f"could not save {path}")
    print(f"saved {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="directory of the PNGs (docs)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of traffic before the pictures")
    args = parser.parse_args(argv)
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.access(binary, os.X_OK):
            print(f"{binary} is missing: apt-get install chromium chromium-driver", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with NodeThread(local_options(rpc=None)) as node, tempfile.TemporaryDirectory() as tmp:
        with HttpClient(node.http_url) as client:
            demo_queues(client)
        stop = threading.Event()
        pusher = threading.Thread(target=traffic, args=(node.http_url, stop), name="demo-traffic")
        pusher.start()
        driver = browser(Path(tmp) / "profile")
        try:
            time.sleep(args.seconds)  # the rate history takes a sample every 2 s
            base = f"{node.http_url}/console/?poll=1000"
            shoot(driver, f"{base}#/", '[data-test="queue-row"]', args.out / "console.png")
            shoot(driver, f"{base}#/queue/{QUEUE_PAGE}", '[data-test="peek-row"]', args.out / "console-queue.png")
        finally:
            stop.set()
            pusher.join(timeout=10)
            driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
