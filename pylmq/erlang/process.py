"""An Erlang process on the Python node: a pid, a mailbox with selective receive, links and monitors.

Only the process side lives here; the node that routes signals between processes and to other
nodes (:class:`pylmq.erlang.node.Node`) is reached through :class:`Host`, so this module does not
import it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol

from pylmq.erlang.terms import Atom, Pid, Reference, Term
from pylmq.errors import ProcessExited

__all__ = ["Dest", "Handler", "Host", "Process"]

NORMAL = Atom("normal")

Handler = Callable[["Process", Term], None]
Dest = Pid | Atom | str | tuple[Atom | str, Atom | str]


class Host(Protocol):
    """What a process asks of its node: send, link, monitor, and end it."""

    def send(self, dest: Dest, msg: Term, sender: Pid | None = None) -> None: ...

    def link(self, proc: Process, pid: Pid) -> None: ...

    def unlink(self, proc: Process, pid: Pid) -> None: ...

    def monitor(self, proc: Process, target: Dest, ref: Reference | None = None) -> Reference: ...

    def demonitor(self, proc: Process, ref: Reference) -> None: ...

    def _terminate(self, proc: Process, reason: Term) -> None: ...


class Process:
    """A Python process on the node: a pid, a mailbox with selective receive, links and monitors.

    A process made with a ``handler`` has no mailbox: each message is handed to the handler at
    once, in order (that is how the node's own services work).
    """

    def __init__(self, node: Host, pid: Pid, handler: Handler | None = None) -> None:
        self.node = node
        self.pid = pid
        self.handler = handler
        self.name: Atom | None = None
        self.trap_exit = False
        self.alive = True
        self.exit_reason: Term = None
        self.links: dict[Pid, int] = {}  # 0 = linked, n > 0 = unlinking with UNLINK_ID n
        self.monitors: dict[Reference, Term] = {}  # monitors this process holds: ref -> target
        self.monitored_by: dict[Reference, tuple[Pid, Atom | None]] = {}  # ref -> (watcher, name used)
        self._mailbox: deque[Term] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"<Process {self.pid!r}{' ' + self.name.name if self.name else ''}>"

    # -- mailbox

    def deliver(self, msg: Term) -> None:
        if not self.alive:
            return
        if self.handler is not None:
            self.handler(self, msg)
            return
        self._mailbox.append(msg)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def receive(self, match: Callable[[Term], bool] | None = None, timeout: float | None = None) -> Term:
        """The first message satisfying ``match`` (any message if None), removed from the mailbox.

        Raises TimeoutError after ``timeout`` seconds and ProcessExited if the process is killed.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        scanned = 0
        while True:
            if not self.alive:
                raise ProcessExited(f"{self.pid!r} exited: {self.exit_reason!r}", self.exit_reason)
            box = self._mailbox
            for i in range(scanned, len(box)):
                msg = box[i]
                if match is None or match(msg):
                    del box[i]
                    return msg
            scanned = len(box)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"{self.pid!r}: no matching message within {timeout} s")
            self._waiter = loop.create_future()
            try:
                async with asyncio.timeout(remaining):
                    await self._waiter
            except TimeoutError:
                continue
            finally:
                self._waiter = None

    def mailbox_size(self) -> int:
        return len(self._mailbox)

    # -- conveniences that act as this process

    def send(self, dest: Dest, msg: Term) -> None:
        self.node.send(dest, msg, sender=self.pid)

    def link(self, pid: Pid) -> None:
        self.node.link(self, pid)

    def unlink(self, pid: Pid) -> None:
        self.node.unlink(self, pid)

    def monitor(self, target: Dest) -> Reference:
        return self.node.monitor(self, target)

    def demonitor(self, ref: Reference) -> None:
        self.node.demonitor(self, ref)

    def exit(self, reason: Term = NORMAL) -> None:
        """End this process with ``reason``: links get exit signals, monitors get DOWN."""
        self.node._terminate(self, reason)

    def reply(self, from_: Term, value: Term) -> None:
        """Answer a ``'$gen_call'``: ``from_`` is its ``{CallerPid, Tag}``; the tag is echoed exactly."""
        caller, tag = from_
        self.node.send(caller, (tag, value), sender=self.pid)
