"""What an API access line costs at ``info`` (written) and at ``notice`` (filtered out), the
trade LMQ's README describes. Files go to a temporary directory.

    .venv/bin/python bench/log_overhead.py [--lines N]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from pylmq.config import LagerConfig, LogHandler
from pylmq.log import configure_logging, get_logger


def per_line(level: str, lines: int, log_dir: Path) -> float:
    config = LagerConfig(handlers=(LogHandler("error.log", "error"), LogHandler("console.log", level)))
    setup = configure_logging(config, log_dir)
    log = get_logger("pylmq.api")
    start = time.perf_counter()
    for i in range(lines):
        log.info("access", method="POST", path="/messages/q", status=200, n=i)
    elapsed = time.perf_counter() - start
    setup.close()
    return elapsed / lines


def main(lines: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        at_info = min(per_line("info", lines, Path(tmp)) for _ in range(3))
        at_notice = min(per_line("notice", lines, Path(tmp)) for _ in range(3))
    logging.getLogger().setLevel(logging.WARNING)
    print(f"{lines} access lines, best of 3")
    print(f"  console.log at info   (written):  {at_info * 1e6:7.2f} us/line")
    print(f"  console.log at notice (dropped):  {at_notice * 1e6:7.2f} us/line")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=20_000)
    main(parser.parse_args().lines)
