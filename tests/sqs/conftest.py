"""Fixtures of the SQS tests that share one node per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import client, sqs_node


@pytest.fixture(scope="module")
def node() -> Iterator[NodeThread]:
    """A memory-store node serving SQS, started once for the module's tests."""
    with sqs_node() as n:
        yield n


@pytest.fixture
def sqs(node: NodeThread) -> Any:
    """A boto3 SQS client of that node."""
    return client(node)
