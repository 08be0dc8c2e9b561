"""The README's `make test` sets up everything its tests need before they run, on a new machine.

A machine that has never run anything lacks wrk, nginx, Erlang, Java: each must be installed before
pytest starts (installing wrk in `make bench`, after pytest, once left the bench tests failing on a
fresh clone). And a user who runs pytest without the spark extra sees the Spark tests skipped
with the reason, not collection errors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Binaries some test or the quick bench run by `make test` calls, and where they are used.
NEEDED_BINARIES = {
    "wrk": "tests/bench (the generator), make bench QUICK=1",
    "nginx": "the bench's no-op ceiling target",
    "erl": "the interop, distribution and mixed-cluster tests",
    "erlc": "the Erlang test peer (interop/)",
    "java": "the Spark tests",
    "npm": "the StatsD daemon test",
    "chromium": "the web console's browser tests (tests/console)",
    "chromedriver": "the web console's browser tests (Selenium drives chromium through it)",
}


def dry_run(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("make is needed to read the Makefile's recipes")
    out = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return out.splitlines()


def test_make_pytest_installs_every_needed_binary_before_pytest_runs() -> None:
    lines = dry_run("pytest")
    pytest_at = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    before = "\n".join(lines[:pytest_at])
    for binary, used_by in NEEDED_BINARIES.items():
        assert re.search(rf"\b{binary}\b", before), (
            f"make test runs pytest before it makes sure {binary} is installed ({used_by})"
        )
    assert "apt-get install" in before


def test_spark_tests_are_skipped_with_the_reason_without_pyspark(tmp_path: Path) -> None:
    # A package named pyspark that fails to import as an absent one does stands for an environment
    # without the extra.
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'pyspark\'", name="pyspark")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(ROOT)]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/spark", "-q", "-ra", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout + run.stderr
    # 5: every module skipped, so pytest ran no test; 2 would be collection errors.
    assert run.returncode in (0, 5), out
    assert "error" not in out.lower(), out
    assert "pyspark is not installed: the Spark tests need the spark extra" in out, out
    assert re.search(r"\b\d+ skipped\b", out), out


def test_the_release_tests_name_the_makefiles_install_stamp() -> None:
    # A wrong name makes `make rel` in the release tests install a venv of its own (minutes).
    from tests.rel.rel_helpers import STAMP

    makefile = (ROOT / "Makefile").read_text()
    extras = re.search(r"^EXTRAS \?= (\S+)$", makefile, re.M)
    assert extras is not None and re.search(r"^STAMP  := \$\(VENV\)/\.installed-\$\(EXTRAS\)$", makefile, re.M)
    assert f".venv/.installed-{extras.group(1)}" == STAMP
