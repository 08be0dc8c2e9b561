"""A reader for ``vm.args``, the argument file ``erl -args_file`` reads.

Splitting follows erl: arguments are separated by whitespace, ``#`` starts a comment to the end
of the line, double quotes group words and a backslash quotes the next character. pylmq acts on
``-name``/``-sname``, ``-setcookie``, ``-hidden``, ``-env VAR VALUE``, ``-kernel net_ticktime N``
and nested ``-args_file``; every other flag (``+K true``, ``-heart``, ...) is accepted and
reported in :attr:`VmArgs.notices`, so that the node can log that it has no effect here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pylmq.errors import ConfigError, ConfigSyntaxError

__all__ = ["NameMode", "VmArgs", "parse_vm_args", "split_vm_args"]

NameMode = Literal["long", "short"]

_MAX_INCLUDE_DEPTH = 8


@dataclass(frozen=True, slots=True)
class _Arg:
    text: str
    line: int
    column: int


@dataclass(slots=True)
class VmArgs:
    """What pylmq takes from a vm.args file. ``None`` means the file does not say."""

    name: str | None = None
    name_mode: NameMode | None = None
    cookie: str | None = None
    hidden: bool = False
    env: dict[str, str] = field(default_factory=dict)
    # -App Key Value pairs, e.g. ("kernel", "net_ticktime") -> "20"
    app_env: dict[tuple[str, str], str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)


def _split(text: str, filename: str) -> list[_Arg]:
    args: list[_Arg] = []
    i, line, line_start = 0, 1, 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            i += 1
            line, line_start = line + 1, i
            continue
        if ch.isspace():
            i += 1
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        start_line, start_col = line, i - line_start + 1
        buf: list[str] = []
        while i < n and not text[i].isspace() and text[i] != "#":
            c = text[i]
            if c == "\\":
                if i + 1 >= n:
                    raise ConfigSyntaxError(filename, line, i - line_start + 1, "backslash at end of file")
                buf.append(text[i + 1])
                if text[i + 1] == "\n":
                    line, line_start = line + 1, i + 2
                i += 2
            elif c == '"':
                q_line, q_col = line, i - line_start + 1
                i += 1
                while True:
                    if i >= n:
                        raise ConfigSyntaxError(filename, q_line, q_col, "unterminated double quote")
                    c = text[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\" and i + 1 < n:
                        c = text[i + 1]
                        i += 1
                    if c == "\n":
                        line, line_start = line + 1, i + 1
                    buf.append(c)
                    i += 1
            else:
                buf.append(c)
                i += 1
        args.append(_Arg("".join(buf), start_line, start_col))
    return args


def split_vm_args(text: str, filename: str = "vm.args") -> list[str]:
    """The arguments of a vm.args text, as erl splits them."""
    return [a.text for a in _split(text, filename)]


def _is_flag(arg: str) -> bool:
    return len(arg) > 1 and arg[0] in "-+"


def parse_vm_args(
    text: str,
    filename: str = "vm.args",
    include: Callable[[str], str] | None = None,
    _depth: int = 0,
    _into: VmArgs | None = None,
) -> VmArgs:
    """Read a vm.args text. ``include`` reads a nested ``-args_file`` (erl resolves its path
    against the working directory); without it such a flag is only noted."""
    out = _into if _into is not None else VmArgs()
    args = _split(text, filename)
    i = 0
    while i < len(args):
        flag = args[i]
        j = i + 1
        while j < len(args) and not _is_flag(args[j].text):
            j += 1
        values = [a.text for a in args[i + 1 : j]]
        i = j
        where = f"{filename}:{flag.line}:{flag.column}"
        name = flag.text
        if not _is_flag(name):
            out.notices.append(f"{where}: ignored stray argument {name!r}")
            continue
        if name in ("-name", "-sname"):
            if len(values) != 1:
                raise ConfigError(f"{where}: {name} takes one node name, got {len(values)} arguments")
            out.name, out.name_mode = values[0], "long" if name == "-name" else "short"
        elif name == "-setcookie":
            if len(values) != 1:
                # "-setcookie Node Cookie" (OTP 24+) names another node's cookie: not ours.
                out.notices.append(f"{where}: ignored {name} with {len(values)} arguments")
                continue
            out.cookie = values[0]
        elif name == "-hidden":
            out.hidden = True
        elif name == "-env":
            if len(values) != 2:
                raise ConfigError(f"{where}: -env takes a variable and a value, got {len(values)} arguments")
            out.env[values[0]] = values[1]
        elif name == "-args_file":
            if len(values) != 1:
                raise ConfigError(f"{where}: -args_file takes one file name")
            if include is None:
                out.notices.append(f"{where}: nested argument file {values[0]!r} not read")
            elif _depth >= _MAX_INCLUDE_DEPTH:
                raise ConfigError(f"{where}: -args_file nested more than {_MAX_INCLUDE_DEPTH} deep")
            else:
                try:
                    nested = include(values[0])
                except OSError as e:
                    raise ConfigError(f"{where}: cannot read argument file {values[0]!r}: {e}") from e
                parse_vm_args(nested, values[0], include, _depth + 1, out)
        elif name[0] == "-" and name[1:].isidentifier() and len(values) >= 2 and len(values) % 2 == 0:
            # -App Key Value [Key Value ...]: application environment, as erl's init reads it.
            for k in range(0, len(values), 2):
                out.app_env[(name[1:], values[k])] = values[k + 1]
        else:
            shown = " ".join([name, *values])
            out.notices.append(f"{where}: Erlang VM flag {shown!r} has no effect on pylmq; ignored")
    return out
