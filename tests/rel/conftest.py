"""Fixtures for the release tests: a release built with ``make rel`` into a temporary directory,
configured as an operator would (its etc/vm.args and etc/app.config edited: a unique node name
and cookie, free HTTP/RPC ports, a StatsD port the test listens on), driven with subprocess.

Every release a test builds is stopped at teardown (``bin/lmq stop``, then SIGKILL of the pid in
its pid file if it is still there), so no node outlives its test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rel.rel_helpers import Release, make_release


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Release]:
    """A freshly built, configured, not yet started release."""
    rel = make_release(tmp_path)
    try:
        yield rel
    finally:
        rel.kill()
        rel.statsd.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """One started release shared by the read-mostly tests of a module."""
    rel = make_release(tmp_path_factory.mktemp("rel"))
    try:
        started = rel.lmq("start")
        assert started.returncode == 0, f"bin/lmq start failed: {started.stdout}{started.stderr}"
        yield rel
    finally:
        rel.kill()
        rel.statsd.close()
