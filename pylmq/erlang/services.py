"""What Erlang expects a node to answer: ``net_kernel``, ``rex`` and erpc's spawn requests.

Calls from Erlang reach Python code only through ``Node.functions``, the whitelist filled by
``Node.register_function``: anything else is ``undef``, never an arbitrary import or eval.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from pylmq.erlang.control import SPAWN_REPLY_LINKED, SPAWN_REPLY_MONITORED, Op, frame
from pylmq.erlang.terms import Atom, Pid, Term

if TYPE_CHECKING:
    from pylmq.erlang.connection import Connection
    from pylmq.erlang.process import Dest, Handler, Process

__all__ = ["PythonError", "ServiceHost", "install", "on_spawn_request"]

log = logging.getLogger("pylmq.erlang.services")

A = Atom
GEN_CALL = A("$gen_call")
GEN_CAST = A("$gen_cast")
ERPC = A("erpc")
EXECUTE_CALL = A("execute_call")
EXECUTE_CAST = A("execute_cast")
RETURN = A("return")
ERROR = A("error")
UNDEF = A("undef")
NORMAL = A("normal")
BADRPC = A("badrpc")
EXIT = A("EXIT")
CALL = A("call")
CAST = A("cast")
REX = A("rex")
LINK = A("link")
MONITOR = A("monitor")
IS_AUTH = A("is_auth")
YES = A("yes")
PYTHON = A("python")


class PythonError(Exception):
    """Raise it from a registered function to make Erlang see ``error(Term)`` exactly."""

    def __init__(self, term: Term) -> None:
        super().__init__(repr(term))
        self.term = term


class ServiceHost(Protocol):
    """What the services need from their node (:class:`pylmq.erlang.node.Node`)."""

    functions: dict[tuple[Atom, Atom], Callable[..., Any]]

    def spawn(self, name: Atom | str | None = None, handler: Handler | None = None) -> Process: ...
    def send(self, dest: Dest, msg: Term, sender: Pid | None = None) -> None: ...
    def spawn_task(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]: ...
    def make_pid(self) -> Pid: ...
    def _send_ctrl(self, peer: str, control: tuple[Term, ...], payload: Term = None) -> None: ...


def install(node: ServiceHost) -> None:
    """Register the node's ``net_kernel`` and ``rex`` handler processes."""
    node.spawn("net_kernel", _net_kernel)
    # rex needs the node (its function whitelist, its tasks), not just the process's Host.
    node.spawn("rex", functools.partial(_rex, node))


def _net_kernel(proc: Process, msg: Term) -> None:
    # net_adm:ping calls {is_auth, Node} with an infinite timeout: always answer.
    if type(msg) is tuple and len(msg) == 3 and msg[0] is GEN_CALL:
        request = msg[2]
        if type(request) is tuple and request and request[0] is IS_AUTH:
            proc.reply(msg[1], YES)
        else:
            proc.reply(msg[1], A("not_supported"))


def _lookup(node: ServiceHost, module: Term, function: Term, args: Term) -> Callable[..., Any] | None:
    if type(module) is not Atom or type(function) is not Atom or type(args) is not list:
        return None
    return node.functions.get((module, function))


def _stack(module: Term, function: Term, args: Term) -> list[Term]:
    return [(module, function, args, [])]


async def _run(fn: Callable[..., Any], args: list[Term]) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _error_reason(e: BaseException) -> Term:
    if isinstance(e, PythonError):
        return e.term
    if isinstance(e, TypeError) and "positional argument" in str(e):
        return A("badarity")
    return (PYTHON, type(e).__name__.encode(), str(e).encode())


def _rex(node: ServiceHost, proc: Process, msg: Term) -> None:
    """The ``rex`` server of OTP <= 24 callers (``rpc:call`` fallback) and jinterface-style calls."""
    if type(msg) is not tuple:
        return
    if len(msg) == 3 and msg[0] is GEN_CALL:
        from_, request = msg[1], msg[2]

        def answer(value: Term) -> None:
            proc.reply(from_, value)
    elif len(msg) == 2 and type(msg[0]) is Pid and type(msg[1]) is tuple:
        caller, request = msg[0], msg[1]

        def answer(value: Term) -> None:
            node.send(caller, (REX, value), sender=proc.pid)
    elif len(msg) == 2 and msg[0] is GEN_CAST:
        request = msg[1]
        if type(request) is tuple and len(request) == 5 and request[0] is CAST:
            _, m, f, a, _gl = request
            fn = _lookup(node, m, f, a)
            if fn is not None:
                node.spawn_task(_run(fn, a), f"rex-cast-{m}:{f}")
        return
    else:
        return
    if not (type(request) is tuple and len(request) == 5 and request[0] is CALL):
        answer((BADRPC, A("unknown_call")))
        return
    _, m, f, a, _gl = request
    fn = _lookup(node, m, f, a)
    if fn is None:
        answer((BADRPC, (EXIT, (UNDEF, _stack(m, f, a)))))
        return

    async def work() -> None:
        try:
            value = await _run(fn, a)
        except Exception as e:
            answer((BADRPC, (EXIT, (_error_reason(e), _stack(m, f, a)))))
        else:
            answer(value)

    node.spawn_task(work(), f"rex-{m}:{f}")


def on_spawn_request(node: ServiceHost, conn: Connection, control: tuple[Term, ...], args: Term) -> None:
    """SPAWN_REQUEST from erpc/rpc (OTP 23+): answer SPAWN_REPLY, run, report as the exit reason."""
    req_id, caller, _gl, mfa, opts = control[1:6]
    flags = 0
    if type(opts) is list:
        for opt in opts:
            if opt is LINK:
                flags |= SPAWN_REPLY_LINKED
            elif opt is MONITOR or (type(opt) is tuple and opt and opt[0] is MONITOR):
                flags |= SPAWN_REPLY_MONITORED
    pid = node.make_pid()
    conn.send(frame((Op.SPAWN_REPLY, req_id, caller, flags, pid)))

    def finish(reason: Term) -> None:
        if flags & SPAWN_REPLY_MONITORED:
            node._send_ctrl(conn.peer, (Op.PAYLOAD_MONITOR_P_EXIT, pid, caller, req_id), reason)
        if flags & SPAWN_REPLY_LINKED:
            node._send_ctrl(conn.peer, (Op.PAYLOAD_EXIT, pid, caller), reason)

    module, function, _arity = mfa if type(mfa) is tuple and len(mfa) == 3 else (None, None, None)
    if module is ERPC and function is EXECUTE_CALL and type(args) is list and len(args) == 4:
        res_ref, m, f, a = args
        found = _lookup(node, m, f, a)
        if found is None:
            finish((res_ref, ERROR, UNDEF, _stack(m, f, a)))
            return

        async def call() -> None:
            try:
                value = await _run(found, a)
            except Exception as e:
                finish((res_ref, ERROR, _error_reason(e), _stack(m, f, a)))
            else:
                finish((res_ref, RETURN, value))

        node.spawn_task(call(), f"erpc-{m}:{f}")
    elif module is ERPC and function is EXECUTE_CAST and type(args) is list and len(args) == 3:
        m, f, a = args
        fn = _lookup(node, m, f, a)

        async def cast() -> None:
            try:
                if fn is not None:
                    await _run(fn, a)
            except Exception:
                log.exception("erpc cast %s:%s from %s failed", m, f, conn.peer)
            finish(NORMAL)

        node.spawn_task(cast(), f"erpc-cast-{m}:{f}")
    else:
        # Only erpc's entry points can be spawned here: anything else dies at once with undef,
        # just as a spawn of a missing function does on an Erlang node.
        log.warning("node %s asked to spawn %r: not supported, answering undef", conn.peer, mfa)
        finish((UNDEF, _stack(module, function, args)))
