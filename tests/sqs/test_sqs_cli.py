"""The AWS CLI (`aws sqs ... --endpoint-url`) against a running node, as a subprocess with
dummy credentials: create, send, receive, delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.sqs.sqs_helpers import endpoint, sqs_node


def aws(url: str, home: Path, *args: str) -> Any:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "dummy",
        "AWS_SECRET_ACCESS_KEY": "dummy",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    }
    done = subprocess.run(
        [sys.executable, "-m", "awscli", "sqs", *args, "--endpoint-url", url, "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"aws sqs {args[0]}: exit {done.returncode}: {done.stderr}"
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_create_send_receive_delete_with_the_aws_cli(tmp_path: Path) -> None:
    with sqs_node() as node:
        url = endpoint(node)
        queue = aws(url, tmp_path, "create-queue", "--queue-name", "cli")["QueueUrl"]
        assert queue == f"{url}/000000000000/cli"
        sent = aws(url, tmp_path, "send-message", "--queue-url", queue, "--message-body", "from the cli")
        got = aws(url, tmp_path, "receive-message", "--queue-url", queue, "--attribute-names", "All")
        [m] = got["Messages"]
        assert (m["Body"], m["MessageId"], m["MD5OfBody"]) == (
            "from the cli",
            sent["MessageId"],
            sent["MD5OfMessageBody"],
        )
        aws(url, tmp_path, "delete-message", "--queue-url", queue, "--receipt-handle", m["ReceiptHandle"])
        assert node.node.store.size("cli") == 0
