"""Fixtures for the mixed cluster tests; the clusters themselves are in cluster_helpers.py."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.cluster.cluster_helpers import Mixed, mixed_cluster
from tests.cluster.lmq_reference import RefCluster, reference_cluster


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    with mixed_cluster(tmp_path_factory.mktemp("mixed")) as m:
        yield m


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RefCluster]:
    """Two real LMQ nodes and one pylmq node joined to them, one cluster per test module."""
    with reference_cluster(tmp_path_factory.mktemp("reference"), erlang=2, pylmq=1) as cluster:
        yield cluster


@pytest.fixture
def queue() -> str:
    return "q_" + secrets.token_hex(4)
