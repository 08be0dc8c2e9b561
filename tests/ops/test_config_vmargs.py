"""vm.args as erl -args_file reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.config import parse_vm_args, split_vm_args
from pylmq.errors import ConfigError, ConfigSyntaxError


def test_reads_lmq_vm_args_layout(lmq_files: tuple[Path, Path]) -> None:
    vm_args, _ = lmq_files
    vm = parse_vm_args(vm_args.read_text(), str(vm_args))
    assert (vm.name, vm.name_mode, vm.cookie) == ("lmq@127.0.0.1", "long", "lmq")
    assert vm.notices == [], "commented-out flags must not be read"


def test_sname_is_a_short_name() -> None:
    vm = parse_vm_args("-sname lmq\n-setcookie c\n")
    assert (vm.name, vm.name_mode) == ("lmq", "short")


def test_comments_quotes_and_escapes_split_like_erl() -> None:
    text = '-name a@h # trailing comment\n-setcookie "two words"\n-env X a\\ b  -env Y "q\\"x"\n'
    assert split_vm_args(text) == ["-name", "a@h", "-setcookie", "two words", "-env", "X", "a b", "-env", "Y", 'q"x']


def test_env_and_kernel_settings_are_kept() -> None:
    vm = parse_vm_args("-env ERL_MAX_PORTS 4096\n-kernel net_ticktime 20\n")
    assert vm.env == {"ERL_MAX_PORTS": "4096"}
    assert vm.app_env == {("kernel", "net_ticktime"): "20"}


def test_vm_flags_are_accepted_with_a_notice() -> None:
    vm = parse_vm_args("-name a@b.c\n-heart\n+K true\n+A 5\n", "etc/vm.args")
    assert vm.name == "a@b.c"
    assert vm.notices == [
        "etc/vm.args:2:1: Erlang VM flag '-heart' has no effect on pylmq; ignored",
        "etc/vm.args:3:1: Erlang VM flag '+K true' has no effect on pylmq; ignored",
        "etc/vm.args:4:1: Erlang VM flag '+A 5' has no effect on pylmq; ignored",
    ]


def test_later_flags_win() -> None:
    vm = parse_vm_args("-name a@h\n-setcookie one\n-sname b\n-setcookie two\n")
    assert (vm.name, vm.name_mode, vm.cookie) == ("b", "short", "two")


def test_nested_args_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "cookie.args").write_text("-setcookie secret\n")
    vm = parse_vm_args(f"-name a@h\n-args_file {tmp_path / 'cookie.args'}\n", include=lambda p: Path(p).read_text())
    assert vm.cookie == "secret"


def test_name_without_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"etc/vm.args:2:1: -name takes one node name, got 0 arguments"):
        parse_vm_args("-setcookie c\n-name\n", "etc/vm.args")


def test_unterminated_quote_names_line_and_column() -> None:
    with pytest.raises(ConfigSyntaxError) as info:
        parse_vm_args('-name a@h\n-setcookie "abc\n', "etc/vm.args")
    assert (info.value.line, info.value.column, info.value.message) == (2, 12, "unterminated double quote")
