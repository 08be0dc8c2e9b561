"""A hidden Erlang distribution node: processes, names, links, monitors, calls (connections: net_kernel).

Everything runs on one asyncio loop. Signals (messages, links, exits, monitors) are handled
synchronously in the order they arrive, like Erlang's per-pair ordering requires.

Typical use::

    node = await start_node("py@127.0.0.1", "secret")
    node.register_function("lmq_admin", "status", status)      # Erlang: rpc:call(Py, lmq_admin, status, [])
    await node.rpc("lmq@127.0.0.1", "erlang", "node", [])        # -> Atom('lmq@127.0.0.1')
    events = node.spawn("lmq_event")                            # a registered mailbox
    msg = await events.receive()
    await node.stop()
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from pylmq.erlang import epmd, services
from pylmq.erlang.connection import Connection
from pylmq.erlang.control import Op
from pylmq.erlang.flags import PYLMQ_FLAGS, Flag
from pylmq.erlang.net_kernel import NetKernel, frame_for
from pylmq.erlang.process import Dest, Handler, Process
from pylmq.erlang.terms import Atom, Pid, Reference, Term
from pylmq.errors import DistError, NodeDown, PeerStalled, RemoteError

__all__ = ["Node", "Process", "start_node"]

log = logging.getLogger("pylmq.erlang.node")

A = Atom
EMPTY = A("")
NORMAL = A("normal")
KILL = A("kill")
KILLED = A("killed")
NOPROC = A("noproc")
NOCONNECTION = A("noconnection")
DOWN = A("DOWN")
EXIT = A("EXIT")
PROCESS = A("process")
GEN_CALL = A("$gen_call")
GEN_CAST = A("$gen_cast")
CALL = A("call")
USER = A("user")
REX = A("rex")
BADRPC = A("badrpc")
ERPC, EXECUTE_CALL, MONITOR = A("erpc"), A("execute_call"), A("monitor")
RETURN, THROW, EXIT_CLASS, ERROR = A("return"), A("throw"), A("exit"), A("error")
LATE_SPAWNS = 10_000  # spawn_call()s given up before their spawn reply, remembered at most


def _atom(x: Atom | str) -> Atom:
    return x if isinstance(x, Atom) else A(x)


class Node:
    """A hidden distribution node named ``alive@host``. Create, then ``await start()``."""

    def __init__(
        self,
        name: str,
        cookie: str | bytes,
        *,
        net_ticktime: float = 60.0,
        stall_timeout: float = 0.0,
        epmd_port: int | None = None,
        listen_host: str | None = None,
        flags: int = PYLMQ_FLAGS,
    ) -> None:
        self.name = full_node_name(name)
        self.alive, self.host = self.name.split("@", 1)
        self.atom = A(self.name)
        self.cookie = cookie.encode() if isinstance(cookie, str) else cookie
        self.flags = int(flags)
        self.net_ticktime = net_ticktime
        # Seconds of silence (with a probe unanswered) after which a peer is stalled; 0: never.
        self.stall_timeout = stall_timeout
        self.epmd_port = epmd_port or epmd.default_port()
        self.listen_host = listen_host or (self.host if _is_ip(self.host) else "0.0.0.0")
        self.creation = secrets.randbelow(0xFFFF_FFF0) + 1
        self._pid_ids = itertools.count(1)
        self._ref_ids = itertools.count(1)
        # A reference's third word: random per node run (references of two runs differ even
        # where their creations match), then the counter's high bits; not drawn per reference,
        # which cost a system call on every rpc.
        self._ref_salt = secrets.randbits(32)
        self._unlink_ids = itertools.count(1)
        self._processes: dict[Pid, Process] = {}
        self._names: dict[Atom, Process] = {}
        self._calls: dict[Reference, tuple[str | None, asyncio.Future[Term]]] = {}
        # spawn_call()s waiting for their process's pid (SPAWN_REPLY) or end (its DOWN): each
        # one's callback for the pid.
        self._spawn_calls: dict[Reference, Callable[[Pid], None] | None] = {}
        # Those given up before their spawn reply (timed out, peer stalled): the process may
        # still run the call, and its pid is still told.
        self._late_spawns: dict[Reference, Callable[[Pid], None]] = {}
        # Per peer, the pid of its ``user`` process (and the connection it was learnt on): the
        # group leader of the processes spawn_call() starts there, as rex gives its workers.
        self._group_leaders: dict[str, tuple[Connection, Pid]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.net_kernel = NetKernel(self)
        self.functions: dict[tuple[Atom, Atom], Callable[..., Any]] = {}
        self._caller = self._new_process(self._on_call_reply)
        services.install(self)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, listen: bool = True, register: bool = True, start_epmd: bool = True) -> Node:
        """Listen for peers and register in EPMD (starting pylmq's own epmd if none runs)."""
        creation = await self.net_kernel.start(listen=listen, register=register, start_epmd=start_epmd)
        if creation is not None and creation != self.creation:
            self.creation = creation
            self._rekey()
        log.info("dist node %s up (port %d, creation %d)", self.name, self.port, self.creation)
        return self

    async def stop(self) -> None:
        """Close every connection (peers see the node go down), unregister, stop listening."""
        await self.net_kernel.stop()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn_task(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` owned by the node: cancelled at stop, its crash logged."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dist task %s crashed", task.get_name(), exc_info=task.exception())

    @property
    def port(self) -> int:
        """The distribution port this node listens on (0 until started)."""
        return self.net_kernel.port

    # ------------------------------------------------------------------ identifiers

    def make_pid(self) -> Pid:
        n = next(self._pid_ids)
        return Pid(self.atom, n & 0x7FFF, (n >> 15) & 0x1FFF, self.creation)

    def make_ref(self) -> Reference:
        n = next(self._ref_ids)
        return Reference(
            self.atom, self.creation, (n & 0x3FFFF, (n >> 18) & 0xFFFFFFFF, (self._ref_salt + (n >> 50)) & 0xFFFFFFFF)
        )

    # ------------------------------------------------------------------ processes and names

    def _rekey(self) -> None:
        # Pids made before EPMD gave us our creation (the services') must carry the new one.
        procs, self._processes = self._processes, {}
        for proc in procs.values():
            old = proc.pid
            proc.pid = Pid(self.atom, old.id, old.serial, self.creation)
            self._processes[proc.pid] = proc

    def _new_process(self, handler: Handler | None = None) -> Process:
        proc = Process(self, self.make_pid(), handler)
        self._processes[proc.pid] = proc
        return proc

    def spawn(self, name: Atom | str | None = None, handler: Handler | None = None) -> Process:
        """A new process (registered as ``name`` if given): a mailbox, or ``handler`` per message."""
        if name is not None and _atom(name) in self._names:
            raise DistError(f"name {_atom(name).name} is already registered on {self.name}")
        proc = self._new_process(handler)
        if name is not None:
            self.register_name(name, proc)
        return proc

    def register_name(self, name: Atom | str, proc: Process) -> None:
        atom = _atom(name)
        if atom in self._names and self._names[atom] is not proc:
            raise DistError(f"name {atom.name} is already registered on {self.name}")
        self._names[atom] = proc
        proc.name = atom

    def unregister_name(self, name: Atom | str) -> None:
        proc = self._names.pop(_atom(name), None)
        if proc is not None:
            proc.name = None

    def whereis(self, name: Atom | str) -> Pid | None:
        proc = self._names.get(_atom(name))
        return proc.pid if proc else None

    def process(self, pid: Pid) -> Process | None:
        return self._processes.get(pid)

    def register_function(self, module: Atom | str, function: Atom | str, fn: Callable[..., Any]) -> None:
        """Let Erlang call ``fn(*Args)`` as ``rpc:call(ThisNode, Module, Function, Args)`` / erpc.

        ``fn`` may be a coroutine function. Nothing else is callable from Erlang: this whitelist
        is the only way in, and any other module/function answers ``undef``.
        """
        self.functions[(_atom(module), _atom(function))] = fn

    def serve(
        self,
        name: Atom | str,
        handle_call: Callable[[Term, Term], Any] | None = None,
        handle_cast: Callable[[Term], Any] | None = None,
        handle_info: Callable[[Term], Any] | None = None,
    ) -> Process:
        """A registered gen_server-like process answering ``gen_server:call({Name, Py}, Req)``.

        ``handle_call(request, from_)`` returns the reply (or an awaitable of it);
        ``handle_cast(request)`` and ``handle_info(msg)`` return nothing.
        """

        def on_message(proc: Process, msg: Term) -> None:
            if type(msg) is tuple and len(msg) == 3 and msg[0] is GEN_CALL and handle_call is not None:
                from_ = msg[1]
                result = handle_call(msg[2], from_)
                if inspect.isawaitable(result):
                    self.spawn_task(_reply_later(proc, from_, result), f"call-{proc.name}")
                else:
                    proc.reply(from_, result)
            elif type(msg) is tuple and len(msg) == 2 and msg[0] is GEN_CAST and handle_cast is not None:
                _run_maybe_async(self, handle_cast(msg[1]), f"cast-{proc.name}")
            elif handle_info is not None:
                _run_maybe_async(self, handle_info(msg), f"info-{proc.name}")

        return self.spawn(name, on_message)

    # ------------------------------------------------------------------ sending

    def send(self, dest: Dest, msg: Term, sender: Pid | None = None) -> None:
        """``dest ! msg``: dest is a pid, a registered name, or ``(name, node)``. Never blocks."""
        if type(dest) is Pid:
            if dest.node is self.atom:
                proc = self._processes.get(dest)
                if proc is not None:
                    proc.deliver(msg)
            else:
                self._send_ctrl(dest.node.name, (Op.SEND, EMPTY, dest), msg)
            return
        if isinstance(dest, (Atom, str)):
            name, node = _atom(dest), self.atom
        elif isinstance(dest, tuple) and len(dest) == 2:
            name, node = _atom(dest[0]), _atom(dest[1])
        else:
            raise DistError(f"bad destination {dest!r}")
        if node is self.atom:
            proc = self._names.get(name)
            if proc is not None:
                proc.deliver(msg)
            return
        self._send_ctrl(node.name, (Op.REG_SEND, sender or self._caller.pid, EMPTY, name), msg)

    def _send_ctrl(self, peer: str, control: tuple[Term, ...], payload: Term = None) -> None:
        self.net_kernel.send_ctrl(peer, control, payload)

    # ------------------------------------------------------------------ links, monitors, exits

    def link(self, proc: Process, pid: Pid) -> None:
        if pid in proc.links and proc.links[pid] == 0:
            return
        proc.links[pid] = 0
        if pid.node is self.atom:
            other = self._processes.get(pid)
            if other is None:
                del proc.links[pid]
                self._exit_signal(proc, pid, NOPROC, linked=True)
            else:
                other.links[proc.pid] = 0
        else:
            self._send_ctrl(pid.node.name, (Op.LINK, proc.pid, pid))

    def unlink(self, proc: Process, pid: Pid) -> None:
        if pid not in proc.links:
            return
        if pid.node is self.atom:
            del proc.links[pid]
            other = self._processes.get(pid)
            if other is not None:
                other.links.pop(proc.pid, None)
            return
        unlink_id = next(self._unlink_ids)
        proc.links[pid] = unlink_id  # until the peer's UNLINK_ID_ACK, exits through it are ignored
        self._send_ctrl(pid.node.name, (Op.UNLINK_ID, unlink_id, proc.pid, pid))

    def monitor(self, proc: Process, target: Dest, ref: Reference | None = None) -> Reference:
        ref = ref or self.make_ref()
        if isinstance(target, (Atom, str)):
            target = (_atom(target), self.atom)
        if type(target) is Pid:
            if target.node is self.atom:
                other = self._processes.get(target)
                if other is None:
                    proc.deliver((DOWN, ref, PROCESS, target, NOPROC))
                else:
                    proc.monitors[ref] = target
                    other.monitored_by[ref] = (proc.pid, None)
            else:
                proc.monitors[ref] = target
                self._send_ctrl(target.node.name, (Op.MONITOR_P, proc.pid, target, ref))
            return ref
        if not (isinstance(target, tuple) and len(target) == 2):
            raise DistError(f"cannot monitor {target!r}")
        name, node = _atom(target[0]), _atom(target[1])
        if node is self.atom:
            other = self._names.get(name)
            if other is None:
                proc.deliver((DOWN, ref, PROCESS, (name, node), NOPROC))
            else:
                proc.monitors[ref] = (name, node)
                other.monitored_by[ref] = (proc.pid, name)
        else:
            proc.monitors[ref] = (name, node)
            self._send_ctrl(node.name, (Op.MONITOR_P, proc.pid, name, ref))
        return ref

    def demonitor(self, proc: Process, ref: Reference) -> None:
        target = proc.monitors.pop(ref, None)
        if target is None:
            return
        if type(target) is Pid:
            if target.node is self.atom:
                other = self._processes.get(target)
                if other is not None:
                    other.monitored_by.pop(ref, None)
            else:
                self._send_ctrl(target.node.name, (Op.DEMONITOR_P, proc.pid, target, ref))
            return
        name, node = target
        if node is self.atom:
            other = self._names.get(name)
            if other is not None:
                other.monitored_by.pop(ref, None)
        else:
            self._send_ctrl(node.name, (Op.DEMONITOR_P, proc.pid, name, ref))

    def exit(self, pid: Pid, reason: Term, sender: Pid | None = None) -> None:
        """``exit(Pid, Reason)``: an exit signal that is not about a link."""
        from_ = sender or self._caller.pid
        if pid.node is self.atom:
            proc = self._processes.get(pid)
            if proc is not None:
                self._exit_signal(proc, from_, reason, linked=False)
        else:
            self._send_ctrl(pid.node.name, (Op.PAYLOAD_EXIT2, from_, pid), reason)

    def _exit_signal(self, proc: Process, from_: Term, reason: Term, *, linked: bool) -> None:
        if not proc.alive:
            return
        if reason is KILL and not linked:
            self._terminate(proc, KILLED)
        elif proc.trap_exit:
            proc.deliver((EXIT, from_, reason))
        elif reason is not NORMAL:
            self._terminate(proc, reason)

    def _terminate(self, proc: Process, reason: Term) -> None:
        if not proc.alive:
            return
        proc.alive = False
        proc.exit_reason = reason
        self._processes.pop(proc.pid, None)
        if proc.name is not None and self._names.get(proc.name) is proc:
            del self._names[proc.name]
        w = proc._waiter
        if w is not None and not w.done():
            w.set_result(None)
        for pid, state in list(proc.links.items()):
            if state != 0:
                continue
            if pid.node is self.atom:
                other = self._processes.get(pid)
                if other is not None and other.links.pop(proc.pid, None) == 0:
                    self._exit_signal(other, proc.pid, reason, linked=True)
            else:
                self._send_ctrl(pid.node.name, (Op.PAYLOAD_EXIT, proc.pid, pid), reason)
        proc.links.clear()
        for ref, (watcher, name) in list(proc.monitored_by.items()):
            subject: Term = (name, self.atom) if name is not None else proc.pid
            if watcher.node is self.atom:
                other = self._processes.get(watcher)
                if other is not None and other.monitors.pop(ref, None) is not None:
                    other.deliver((DOWN, ref, PROCESS, subject, reason))
            else:
                self._send_ctrl(
                    watcher.node.name,
                    (Op.PAYLOAD_MONITOR_P_EXIT, name if name is not None else proc.pid, watcher, ref),
                    reason,
                )
        proc.monitored_by.clear()
        for ref in list(proc.monitors):
            self.demonitor(proc, ref)

    # ------------------------------------------------------------------ calls from Python

    def _on_call_reply(self, _proc: Process, msg: Term) -> None:
        if type(msg) is not tuple:
            return
        if len(msg) == 2:
            entry = self._calls.pop(msg[0], None) if type(msg[0]) is Reference else None
            if entry is not None and not entry[1].done():
                entry[1].set_result(msg[1])
        elif len(msg) == 5 and msg[0] is DOWN:
            entry = self._calls.pop(msg[1], None)
            if entry is not None and not entry[1].done():
                if msg[1] in self._spawn_calls:
                    entry[1].set_result(msg[4])  # a spawn_call's process ended: its result
                else:
                    entry[1].set_exception(RemoteError(f"{msg[3]!r} is gone: {msg[4]!r}", msg[4]))

    async def rpc(
        self, peer: str, module: Atom | str, function: Atom | str, args: list[Term], timeout: float = 30.0
    ) -> Term:
        """``rpc:call(Peer, Module, Function, Args)`` through the peer's ``rex`` server.

        Returns the value; ``{badrpc, Reason}`` raises RemoteError with ``term = Reason``,
        a lost connection NodeDown, a stalled peer (before or during the call) PeerStalled,
        no answer in time TimeoutError.
        """
        await self._connected(peer)
        ref = self.make_ref()
        fut: asyncio.Future[Term] = asyncio.get_running_loop().create_future()
        self._calls[ref] = (peer, fut)
        me = self._caller.pid
        request = (GEN_CALL, (me, ref), (CALL, _atom(module), _atom(function), list(args), USER))
        self._send_ctrl(peer, (Op.REG_SEND, me, EMPTY, REX), request)
        try:
            async with asyncio.timeout(timeout):
                result = await fut
        finally:
            self._calls.pop(ref, None)
        if type(result) is tuple and len(result) == 2 and result[0] is BADRPC:
            raise RemoteError(f"rpc {module}:{function} on {peer} failed: {result[1]!r:.300}", result[1])
        return result

    async def _connected(self, peer: str) -> Connection | None:
        """The connection to ``peer``, made if needed; PeerStalled (nothing sent) if it stalls."""
        await self.connect(peer)
        conn = self.net_kernel.connections.get(peer)
        if conn is not None and conn.stalled:
            # A call would only wait out its timeout: the caller may have another node to ask.
            raise PeerStalled(f"node {peer} is stalled: nothing received for {conn.silence():.1f} s", sent=False)
        return conn

    async def spawn_call(
        self,
        peer: str,
        module: Atom | str,
        function: Atom | str,
        args: list[Term],
        timeout: float = 30.0,
        spawned: Callable[[Pid], None] | None = None,
    ) -> Term:
        """:meth:`rpc`, run as OTP 23+'s ``rpc:call`` runs it: in a process spawned for the call
        on the peer (a spawn request of ``erpc:execute_call``, monitored; the result comes as its
        exit reason). ``spawned`` gets that process's pid before it runs the call (when the
        peer's spawn reply arrives, even after the call was given up), so that what it does can
        be told apart as this node's: a Mnesia transaction's id names its coordinator's pid. Its
        group leader is the peer's ``user``, as for rex's workers: its output and log events go
        where the peer's own go. A peer without spawn requests (before OTP 23) or without a
        ``user`` is sent an rpc through ``rex`` instead, and ``spawned`` is not called. Same
        results and errors as :meth:`rpc`."""
        conn = await self._connected(peer)
        if conn is None or not conn.flags & Flag.SPAWN:
            return await self.rpc(peer, module, function, args, timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout  # the bound of the whole call, look-up included
        known = self._group_leaders.get(peer)
        if known is None or known[0] is not conn:
            user = await self.rpc(peer, "erlang", "whereis", [USER], timeout)
            if type(user) is not Pid:
                return await self.rpc(peer, module, function, args, max(0.0, deadline - loop.time()))
            known = self._group_leaders[peer] = (conn, user)
        req = self.make_ref()
        fut: asyncio.Future[Term] = loop.create_future()
        self._calls[req] = (peer, fut)
        self._spawn_calls[req] = spawned
        caller = self._caller
        # The monitor's target until the spawn reply names the pid: a node lost meanwhile
        # still ends it (noconnection).
        caller.monitors[req] = (ERPC, A(peer))
        mfa = (ERPC, EXECUTE_CALL, 4)
        call_args = [req, _atom(module), _atom(function), list(args)]
        self._send_ctrl(peer, (Op.SPAWN_REQUEST, req, caller.pid, known[1], mfa, [MONITOR]), call_args)
        try:
            async with asyncio.timeout_at(deadline):
                reason = await fut
        finally:
            self._calls.pop(req, None)
            self._spawn_calls.pop(req, None)
            target = caller.monitors.pop(req, None)  # its DOWN, if it comes later, is dropped
            if type(target) is tuple and spawned is not None:
                # Given up (timed out, peer stalled) before any spawn reply: the call may still run.
                if len(self._late_spawns) >= LATE_SPAWNS:
                    del self._late_spawns[next(iter(self._late_spawns))]
                self._late_spawns[req] = spawned
        ours = type(reason) is tuple and len(reason) >= 3 and reason[0] == req
        if ours and (reason[1] is RETURN or reason[1] is THROW):  # rpc:call answers a thrown value
            return reason[2]
        if reason is NOCONNECTION:
            raise NodeDown(f"node {peer} went down (noconnection)")
        # As rex reports a failed call, {badrpc, {'EXIT', Why}}: Why is {Error, Stack} for an
        # error, the reason of an exit, and the exit reason of a process ended from outside.
        if ours and reason[1] is ERROR and len(reason) == 4:
            why: Term = (reason[2], reason[3])
        else:
            why = reason[2] if ours and (reason[1] is EXIT_CLASS or reason[1] is ERROR) else reason
        raise RemoteError(f"rpc {module}:{function} on {peer} failed: {(EXIT, why)!r:.300}", (EXIT, why))

    def _on_spawn_reply(self, req: Term, result: Term) -> None:
        if type(req) is not Reference:
            return
        late = self._late_spawns.pop(req, None)
        if late is not None and type(result) is Pid:
            late(result)  # a call given up before its spawn reply: it runs all the same
        if req not in self._spawn_calls:
            return
        if type(result) is Pid:
            self._caller.monitors[req] = result
            spawned = self._spawn_calls[req]
            if spawned is not None:
                spawned(result)
            return
        # The spawn failed (an atom: badopt, notsup, system_limit, ...): nothing ran.
        self._caller.monitors.pop(req, None)
        entry = self._calls.pop(req, None)
        if entry is not None and not entry[1].done():
            entry[1].set_exception(RemoteError(f"spawning on {entry[0]} failed: {result!r:.300}", result))

    async def call(self, dest: Dest, request: Term, timeout: float = 5.0) -> Term:
        """``gen_server:call(Dest, Request, Timeout)``; a missing or dying server raises RemoteError."""
        if isinstance(dest, tuple):
            peer = _atom(dest[1]).name
            if peer != self.name:
                await self.connect(peer)
        elif type(dest) is Pid and dest.node is not self.atom:
            await self.connect(dest.node.name)
        ref = self.make_ref()
        fut: asyncio.Future[Term] = asyncio.get_running_loop().create_future()
        self._calls[ref] = (None, fut)
        self.monitor(self._caller, dest, ref)  # a local noproc DOWN fails fut right here
        self.send(dest, (GEN_CALL, (self._caller.pid, ref), request), sender=self._caller.pid)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        finally:
            self._calls.pop(ref, None)
            self.demonitor(self._caller, ref)

    def cast(self, dest: Dest, request: Term) -> None:
        """``gen_server:cast(Dest, Request)``."""
        self.send(dest, (GEN_CAST, request))

    async def ping(self, peer: str, timeout: float = 5.0) -> bool:
        """``net_adm:ping``: True for pong."""
        try:
            reply = await self.call((A("net_kernel"), A(peer)), (A("is_auth"), self.atom), timeout)
        except (DistError, TimeoutError):
            return False
        return reply is A("yes")

    # ------------------------------------------------------------------ node monitoring

    def monitor_node(self, peer: str, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``callback(peer, reason)`` when the connection to ``peer`` goes down.

        ``peer == "*"`` watches every peer. Returns a function that cancels the watch.
        """
        return self.net_kernel.monitor_node(peer, callback)

    def monitor_stalls(self, callback: Callable[[str, bool], None]) -> Callable[[], None]:
        """Call ``callback(peer, stalled)`` when a connected peer stalls (True) and when it is
        heard from again (False). Returns a function that cancels the watch."""
        return self.net_kernel.monitor_stalls(callback)

    def connected_nodes(self) -> list[str]:
        return self.net_kernel.connected_nodes()

    def stalled_nodes(self) -> dict[str, float]:
        """Connected peers that are stalled -> seconds since anything came from them."""
        return self.net_kernel.stalled_nodes()

    def disconnect(self, peer: str) -> None:
        self.net_kernel.disconnect(peer)

    async def connect(self, peer: str) -> None:
        """Make sure a connection to ``peer`` is up; raises NodeDown / HandshakeError / CookieMismatch."""
        await self.net_kernel.connect(peer)

    # ------------------------------------------------------------------ what the net kernel reports

    def _probe_request(self) -> tuple[tuple[Term, ...], Term]:
        # net_adm:ping's request: every node answers it at once. The reply carries a ref that no
        # call waits for, so the caller process drops it; its arrival is all that counts.
        request = (GEN_CALL, (self._caller.pid, self.make_ref()), (A("is_auth"), self.atom))
        return (Op.REG_SEND, self._caller.pid, EMPTY, A("net_kernel")), request

    def _peer_stalled(self, peer: str, silence: float) -> None:
        for call_peer, fut in list(self._calls.values()):
            if call_peer == peer and not fut.done():
                fut.set_exception(PeerStalled(f"node {peer} is stalled: nothing received for {silence:.1f} s"))

    def _peer_down(self, peer: str, reason: str) -> None:
        """Every link and monitor involving ``peer`` gets ``noconnection``; calls to it fail."""
        peer_atom = A(peer)
        for proc in list(self._processes.values()):
            for pid in [p for p in proc.links if p.node is peer_atom]:
                state = proc.links.pop(pid)
                if state == 0:
                    self._exit_signal(proc, pid, NOCONNECTION, linked=True)
            for ref, target in list(proc.monitors.items()):
                node = target.node if type(target) is Pid else target[1]
                if node is peer_atom:
                    del proc.monitors[ref]
                    proc.deliver((DOWN, ref, PROCESS, target, NOCONNECTION))
            for ref, (watcher, _) in list(proc.monitored_by.items()):
                if watcher.node is peer_atom:
                    del proc.monitored_by[ref]
        for call_peer, fut in list(self._calls.values()):
            if call_peer == peer and not fut.done():
                fut.set_exception(NodeDown(f"node {peer} went down ({reason})"))

    # ------------------------------------------------------------------ incoming signals

    def _on_frame(self, conn: Connection, control: Term, payload: Term | None) -> None:
        if type(control) is not tuple or not control or type(control[0]) is not int:
            log.error("node %s sent a bad control message %r; ignored", conn.peer, control)
            return
        op = control[0]
        procs = self._processes
        if op == Op.SEND or op == Op.SEND_SENDER or op == Op.SEND_TT or op == Op.SEND_SENDER_TT:
            proc = procs.get(control[2])
            if proc is not None:
                proc.deliver(payload)
        elif op == Op.REG_SEND or op == Op.REG_SEND_TT:
            proc = self._names.get(control[3])
            if proc is not None:
                proc.deliver(payload)
        elif op == Op.LINK:
            self._on_link(conn, control[1], control[2])
        elif op in (Op.EXIT, Op.EXIT_TT, Op.PAYLOAD_EXIT, Op.PAYLOAD_EXIT_TT):
            reason = payload if op >= Op.PAYLOAD_EXIT else control[-1]
            proc = procs.get(control[2])
            if proc is not None and proc.links.get(control[1]) == 0:
                del proc.links[control[1]]
                self._exit_signal(proc, control[1], reason, linked=True)
        elif op in (Op.EXIT2, Op.EXIT2_TT, Op.PAYLOAD_EXIT2, Op.PAYLOAD_EXIT2_TT):
            reason = payload if op >= Op.PAYLOAD_EXIT2 else control[-1]
            proc = procs.get(control[2])
            if proc is not None:
                self._exit_signal(proc, control[1], reason, linked=False)
        elif op == Op.MONITOR_P:
            self._on_monitor(conn, control[1], control[2], control[3])
        elif op == Op.DEMONITOR_P:
            target = control[2]
            proc = procs.get(target) if type(target) is Pid else self._names.get(target)
            if proc is not None:
                proc.monitored_by.pop(control[3], None)
        elif op == Op.MONITOR_P_EXIT or op == Op.PAYLOAD_MONITOR_P_EXIT:
            reason = payload if op == Op.PAYLOAD_MONITOR_P_EXIT else control[4]
            proc = procs.get(control[2])
            if proc is not None:
                target = proc.monitors.pop(control[3], None)
                if target is not None:
                    proc.deliver((DOWN, control[3], PROCESS, target, reason))
        elif op == Op.UNLINK_ID:
            _, unlink_id, from_, to = control
            proc = procs.get(to)
            if proc is not None and proc.links.get(from_) == 0:
                del proc.links[from_]
            conn.send(frame_for(conn.flags, (Op.UNLINK_ID_ACK, unlink_id, to, from_), None))
        elif op == Op.UNLINK_ID_ACK:
            _, unlink_id, from_, to = control
            proc = procs.get(to)
            if proc is not None and proc.links.get(from_) == unlink_id:
                del proc.links[from_]
        elif op == Op.UNLINK:
            proc = procs.get(control[2])
            if proc is not None and proc.links.get(control[1]) == 0:
                del proc.links[control[1]]
        elif op == Op.SPAWN_REQUEST or op == Op.SPAWN_REQUEST_TT:
            services.on_spawn_request(self, conn, control, payload if payload is not None else [])
        elif op == Op.SPAWN_REPLY or op == Op.SPAWN_REPLY_TT:
            if len(control) >= 5:
                self._on_spawn_reply(control[1], control[4])
        else:
            log.debug("node %s sent unsupported control op %s; ignored", conn.peer, op)

    def _on_link(self, conn: Connection, from_: Pid, to: Pid) -> None:
        proc = self._processes.get(to)
        if proc is None:
            conn.send(frame_for(conn.flags, (Op.PAYLOAD_EXIT, to, from_), NOPROC))
        elif from_ not in proc.links:  # while we unlink, a LINK from the peer is stale
            proc.links[from_] = 0

    def _on_monitor(self, conn: Connection, watcher: Pid, target: Term, ref: Reference) -> None:
        if type(target) is Pid:
            proc, name = self._processes.get(target), None
        else:
            proc, name = self._names.get(target), target
        if proc is None:
            conn.send(frame_for(conn.flags, (Op.PAYLOAD_MONITOR_P_EXIT, target, watcher, ref), NOPROC))
        else:
            proc.monitored_by[ref] = (watcher, name)


# ---------------------------------------------------------------------- helpers


async def _reply_later(proc: Process, from_: Term, result: Awaitable[Term]) -> None:
    proc.reply(from_, await result)


def _run_maybe_async(node: Node, result: Any, name: str) -> None:
    if inspect.isawaitable(result):
        node.spawn_task(result, name)


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


def full_node_name(name: str, long_names: bool | None = None) -> str:
    """``alive@host`` from ``alive`` or ``alive@host``: a bare alive gets this host's short name
    (``-sname``) or fully qualified name (``-name``, when ``long_names``)."""
    if "@" in name:
        alive, host = name.split("@", 1)
        if not alive or not host:
            raise DistError(f"bad node name {name!r}: both parts of alive@host must be non-empty")
        return name
    if not name:
        raise DistError("empty node name")
    host = socket.getfqdn() if long_names else socket.gethostname().split(".")[0]
    return f"{name}@{host}"


def is_long_name(name: str) -> bool:
    """``-name`` style (dotted or IP host) rather than ``-sname``."""
    host = name.partition("@")[2]
    return "." in host or _is_ip(host)


async def start_node(
    name: str,
    cookie: str | bytes,
    *,
    net_ticktime: float = 60.0,
    stall_timeout: float = 0.0,
    epmd_port: int | None = None,
    listen_host: str | None = None,
) -> Node:
    """Start a registered, listening hidden node (what ``python -m pylmq --name --cookie`` does)."""
    node = Node(name, cookie, net_ticktime=net_ticktime, stall_timeout=stall_timeout, epmd_port=epmd_port,
                listen_host=listen_host)  # fmt: skip
    return await node.start()
