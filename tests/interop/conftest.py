"""Fixtures for the interop tests: two real Erlang LMQ test peers, joined."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.interop.erlpeer import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Peers a and b in one Mnesia cluster (b joined a), shared by a module's tests."""
    with running_cluster(tmp_path_factory.mktemp("erl")) as running:
        yield running


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses."""
    return "q_" + secrets.token_hex(4)
