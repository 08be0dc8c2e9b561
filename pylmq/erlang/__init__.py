"""pylmq.erlang: a hidden Erlang distribution node in pure asyncio.

Public surface: :func:`start_node` / :class:`Node` (``stop()``, ``rpc``, ``call``, ``cast``,
``send``, ``spawn``, ``serve``, ``register_name``, ``register_function``, ``monitor_node``,
``ping``), :class:`Process` (mailbox with selective ``receive``, links, monitors), the term
types, and the codec (``encode``/``decode``).
"""

from pylmq.erlang.etf import DecodeError, EncodeError, decode, encode
from pylmq.erlang.node import Node, Process, is_long_name, start_node
from pylmq.erlang.services import PythonError
from pylmq.erlang.terms import (
    Atom,
    BitBinary,
    Export,
    Fun,
    ImproperList,
    Key,
    Pid,
    Port,
    Reference,
    erl_string,
    to_text,
)

__all__ = [
    "Atom",
    "BitBinary",
    "DecodeError",
    "EncodeError",
    "Export",
    "Fun",
    "ImproperList",
    "Key",
    "Node",
    "Pid",
    "Port",
    "Process",
    "PythonError",
    "Reference",
    "decode",
    "encode",
    "erl_string",
    "is_long_name",
    "start_node",
    "to_text",
]
