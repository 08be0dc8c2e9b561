"""Where a node serves queue_server's protocol: Settings (app.config, flags), NodeOptions, the
node's listeners; test nodes never take the default port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pylmq.errors import ConfigError
from pylmq.node.lmq_node import NodeOptions
from pylmq.node.testing import local_options, running_node
from pylmq.wire.ports import DEFAULT_QS_PORT
from tests.config_helpers import options_from


def test_on_by_default_on_the_loopback_interface_whatever_the_http_host(tmp_path: Path) -> None:
    # Not the HTTP host's 0.0.0.0: UDP answers amplify (docs/queue-server.md), so serving other
    # hosts is the operator's choice.
    assert options_from(tmp_path).qs == ("127.0.0.1", DEFAULT_QS_PORT) == ("127.0.0.1", 1111)
    assert options_from(tmp_path, "{store, memory}").qs == ("127.0.0.1", 1111)


def test_app_config_forms(tmp_path: Path) -> None:
    assert options_from(tmp_path, "{qs, 2222}").qs == ("127.0.0.1", 2222)
    assert options_from(tmp_path, '{qs, {"127.0.0.1", 2223}}').qs == ("127.0.0.1", 2223)
    assert options_from(tmp_path, "{qs, {{127,0,0,2}, 2224}}").qs == ("127.0.0.2", 2224)
    assert options_from(tmp_path, "{qs, off}").qs is None
    opts = options_from(tmp_path, "{qs_max_request, 4096}, {qs_udp_max, 1500}, {qs_idle_timeout, 250}")
    assert (opts.qs_max_request, opts.qs_udp_max, opts.qs_idle_timeout) == (4096, 1500, 0.25)
    with pytest.raises(ConfigError, match="qs_port must be a port number"):
        options_from(tmp_path, "{qs, 70000}")
    with pytest.raises(ConfigError, match="qs_udp_max must be at most 65507"):
        options_from(tmp_path, "{qs_udp_max, 70000}")


def test_command_line_flag_overrides_the_file(tmp_path: Path) -> None:
    assert options_from(tmp_path, "{qs, off}", ("--qs", "127.0.0.1:3333")).qs == ("127.0.0.1", 3333)
    assert options_from(tmp_path, "{qs, 2222}", ("--qs", "off")).qs is None
    assert options_from(tmp_path, "", ("--qs", ":4444")).qs == ("0.0.0.0", 4444)


def test_programmatic_and_test_nodes_do_not_take_the_default_port() -> None:
    # A node built in code serves the protocol only when asked; local_options too, so that
    # tests running side by side never fight over port 1111.
    assert NodeOptions().qs is None
    assert local_options().qs is None


async def test_node_serves_tcp_and_udp_on_one_port_and_stops_listening() -> None:
    async with running_node(local_options(qs=("127.0.0.1", 0))) as node:
        assert node.qs_address is not None
        host, port = node.qs_address
        assert port != 0
        with socket.create_connection((host, port), timeout=5):
            pass
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with pytest.raises(OSError):
            udp.bind((host, port))  # taken by the node
        udp.close()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=5).close()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, port))  # free again
    udp.close()


async def test_a_taken_port_is_a_config_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="cannot listen for queue_server's protocol"):
            async with running_node(local_options(qs=("127.0.0.1", port))):
                pass
