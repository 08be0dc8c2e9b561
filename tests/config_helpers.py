"""Helpers for the tests of a listener's settings (queue_server's, SQS's ...): the NodeOptions a
node would run with, built from an app.config and command-line flags as ``pylmq`` builds them."""

from __future__ import annotations

from pathlib import Path

from pylmq.cli.main import build_parser, overrides_from_args
from pylmq.config import load_settings
from pylmq.node.lmq_node import NodeOptions
from pylmq.node.service import node_options


def options_from(tmp_path: Path, pylmq_section: str = "", argv: tuple[str, ...] = ()) -> NodeOptions:
    """The node's options from an app.config whose ``lmq`` section serves HTTP on 10.0.0.1:9980
    and whose ``pylmq`` section is ``pylmq_section`` (no file when empty), then ``argv``."""
    app = None
    if pylmq_section:
        app = tmp_path / "app.config"
        app.write_text(f'[{{lmq, [{{http, {{"10.0.0.1", 9980}}}}]}}, {{pylmq, [{pylmq_section}]}}].\n')
    s = load_settings(
        None, app, {"cookie_file": tmp_path / "none", **overrides_from_args(build_parser().parse_args(argv))}
    )
    return node_options(s)
