"""Celery with its SQS broker (kombu's SQS transport, ``celery[sqs]``) through a running node.

A real Celery worker runs as a subprocess (``--pool solo``) with ``broker_url = sqs://...`` on
the node's SQS endpoint; this process sends tasks to it through the same broker. The tasks
write what they did to files (the side channel: no result backend), so the test sees each task
run, a task that raises and retries itself (``self.retry``) run twice, and the queue end empty:
every message the worker took was deleted through pylmq.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from celery import Celery

from tests.sqs.sqs_helpers import KEY, REGION, SECRET, client, sqs_node

QUEUE = "pylmq-celery"
DEADLINE = 90.0  # seconds for everything the worker does (it answers in about 2 s when idle)

# The worker's app: tasks write to files under RESULTS_DIR, one line per run.
_APP = """
import os
from pathlib import Path

from celery import Celery

app = Celery("celery_tasks", broker=os.environ["BROKER_URL"])
app.conf.update(
    broker_transport_options={
        "region": "us-east-1",
        "is_secure": False,
        "wait_time_seconds": 1,
        "polling_interval": 0.1,
        "visibility_timeout": 60,
    },
    task_default_queue=os.environ["QUEUE"],
    worker_enable_remote_control=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
OUT = Path(os.environ["RESULTS_DIR"])


def note(name, line):
    with open(OUT / name, "a") as f:
        f.write(line + "\\n")


@app.task(name="record")
def record(text):
    note("record", text)


@app.task(name="flaky", bind=True, max_retries=3)
def flaky(self, key):
    attempt = self.request.retries + 1
    note("flaky", f"{key} attempt {attempt}")
    if attempt == 1:
        raise self.retry(exc=RuntimeError("first attempt fails"), countdown=0)
    note("flaky", f"{key} done")
"""


def broker_url(node: Any) -> str:
    host, port = node.node.sqs_address
    return f"sqs://{KEY}:{SECRET.replace('/', '%2F')}@{host}:{port}"


@contextlib.contextmanager
def celery_worker(url: str, workdir: Path, results: Path) -> Iterator[subprocess.Popen[str]]:
    (workdir / "celery_tasks.py").write_text(_APP)
    env = {
        **os.environ,
        "BROKER_URL": url,
        "QUEUE": QUEUE,
        "RESULTS_DIR": str(results),
        "PYTHONPATH": str(workdir),
        "AWS_DEFAULT_REGION": REGION,
    }
    log = open(workdir / "worker.log", "w")  # noqa: SIM115  (closed below, after the worker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "solo", "--loglevel", "INFO",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-Q", QUEUE],
        cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        # Its own process group: the worker and anything it started go, whatever state it is in.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def wait_for(what: str, check: Callable[[], bool], proc: subprocess.Popen[str], workdir: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (workdir / "worker.log").read_text()[-3000:]
            state = "exited" if proc.poll() is not None else "timed out"
            raise AssertionError(f"{what}: the worker {state}; its log ends:\n{tail}")
        time.sleep(0.1)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_celery_worker_runs_tasks_and_a_retry_through_the_sqs_api(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    with sqs_node() as node:
        url = broker_url(node)
        sender = Celery("sender", broker=url)
        sender.conf.update(
            broker_transport_options={"region": REGION, "is_secure": False},
            task_default_queue=QUEUE,
        )
        with celery_worker(url, tmp_path, results) as worker:
            for i in range(3):
                sender.send_task("record", args=[f"task {i}"])
            sender.send_task("flaky", args=["k1"])
            wait_for("three record tasks", lambda: len(lines(results / "record")) == 3, worker, tmp_path)
            wait_for("the retried task", lambda: "k1 done" in lines(results / "flaky"), worker, tmp_path)
            assert sorted(lines(results / "record")) == ["task 0", "task 1", "task 2"]
            # The first attempt raised and retried itself: a second message, run once.
            assert lines(results / "flaky") == ["k1 attempt 1", "k1 attempt 2", "k1 done"]
            # Every message was deleted (acked) over SQS once its task ended: the queue empties
            # (the worker may still be between the last run and its DeleteMessage).
            wait_for("the queue to empty", lambda: node.node.store.size(QUEUE) == 0, worker, tmp_path)
            attrs = client(node).get_queue_attributes(
                QueueUrl=client(node).get_queue_url(QueueName=QUEUE)["QueueUrl"], AttributeNames=["All"]
            )["Attributes"]
            assert attrs["ApproximateNumberOfMessages"] == "0"
            assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
        sender.close()
