"""Where a node serves the SQS API and with which keys: Settings (app.config, flags),
NodeOptions; test nodes never take the default port."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.errors import ConfigError
from pylmq.node.lmq_node import NodeOptions
from pylmq.node.testing import local_options
from pylmq.wire.ports import DEFAULT_SQS_PORT
from tests.config_helpers import options_from


def test_on_by_default_on_the_http_host_at_elasticmqs_port(tmp_path: Path) -> None:
    assert options_from(tmp_path).sqs == ("0.0.0.0", DEFAULT_SQS_PORT) == ("0.0.0.0", 9324)
    assert options_from(tmp_path, "{store, memory}").sqs == ("10.0.0.1", 9324)
    assert options_from(tmp_path).sqs_access_keys == {}


def test_app_config_forms(tmp_path: Path) -> None:
    assert options_from(tmp_path, "{sqs, 9400}").sqs == ("10.0.0.1", 9400)
    assert options_from(tmp_path, '{sqs, {"127.0.0.1", 9401}}').sqs == ("127.0.0.1", 9401)
    assert options_from(tmp_path, "{sqs, off}").sqs is None
    keys = options_from(tmp_path, '{sqs_access_keys, [{"AKID1", "s1"}, {<<"AKID2">>, <<"s2">>}]}').sqs_access_keys
    assert keys == {"AKID1": "s1", "AKID2": "s2"}
    with pytest.raises(ConfigError, match="sqs_port must be a port number"):
        options_from(tmp_path, "{sqs, 70000}")
    with pytest.raises(ConfigError, match="sqs_access_keys"):
        options_from(tmp_path, '{sqs_access_keys, [{"AKID", ""}]}')
    with pytest.raises(ConfigError, match="sqs_access_keys"):
        options_from(tmp_path, "{sqs_access_keys, [akid]}")


def test_command_line_flag_overrides_the_file(tmp_path: Path) -> None:
    assert options_from(tmp_path, "{sqs, off}", ("--sqs", "127.0.0.1:3333")).sqs == ("127.0.0.1", 3333)
    assert options_from(tmp_path, "{sqs, 9400}", ("--sqs", "off")).sqs is None


def test_programmatic_and_test_nodes_do_not_take_the_default_port() -> None:
    assert NodeOptions().sqs is None
    assert local_options().sqs is None
