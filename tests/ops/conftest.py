"""Fixtures for the operations tests (config, logs, metrics)."""

from __future__ import annotations

from pathlib import Path

import pytest

FILES = Path(__file__).parent / "files"


@pytest.fixture
def lmq_files() -> tuple[Path, Path]:
    """vm.args and app.config laid out like the ones LMQ ships."""
    return FILES / "lmq_vm.args", FILES / "lmq_app.config"


@pytest.fixture
def no_cookie_file(tmp_path: Path) -> Path:
    """A cookie file path that does not exist, so tests never read the user's real one."""
    return tmp_path / "no-such.erlang.cookie"
