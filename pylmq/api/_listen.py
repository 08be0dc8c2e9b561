"""A listening socket that takes in every connection waiting for it in one pass of the loop.

Why not ``loop.create_server``: under uvloop (the node's loop) libuv accepts one connection per
pass of the loop. A pass on a busy node answers every ready connection first, so a burst of new
clients waits in the kernel's accept queue, one pass each: 64 connections opened at once
beside 64 busy ones took 0.45 s to be let in, and each newcomer's first request counted that
wait as its latency (docs/decisions/accept-in-batches.md). The standard asyncio loop already
accepts a batch per pass; this does the same whatever the loop.

The work of one pass is bounded (:data:`ACCEPT_BATCH`); connections left in the queue past it
are taken at the next pass, after the others had their turn. Out of file descriptors, accepting
pauses for :data:`ACCEPT_RETRY_DELAY` seconds instead of spinning on a listening socket that
stays readable.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from pylmq.api._eager import start_eagerly

__all__ = ["ACCEPT_BATCH", "ACCEPT_RETRY_DELAY", "Listener", "listen"]

log = logging.getLogger("pylmq.listen")

ACCEPT_BATCH = 256
"""Connections accepted per pass of the loop at most, per listening socket."""
ACCEPT_RETRY_DELAY = 1.0
"""Seconds accepting pauses when the process is out of file descriptors or memory."""

_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Listener:
    """Accepts on ``sockets`` (bound, listening, non-blocking) and hands each connection to a
    protocol made by ``factory``, through the loop's own transports."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        sockets: list[socket.socket],
        batch: int = ACCEPT_BATCH,
        retry_delay: float = ACCEPT_RETRY_DELAY,
    ) -> None:
        self.loop = loop
        self.factory = factory
        self.sockets = sockets
        self.batch = batch
        self.retry_delay = retry_delay
        # Connections whose transport is made but whose connection_made is still to come.
        self._connecting: set[asyncio.Task[None]] = set()
        self._paused: asyncio.TimerHandle | None = None
        self._closed = False
        self._watch()

    def _watch(self) -> None:
        self._paused = None
        for sock in self.sockets:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self.batch):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # the client left before it was accepted
            except OSError as e:
                if e.errno in _OUT_OF_RESOURCES:
                    log.error("cannot accept connections (%s); trying again in %ss", e, self.retry_delay)
                    for s in self.sockets:
                        self.loop.remove_reader(s.fileno())
                    self._paused = self.loop.call_later(self.retry_delay, self._watch)
                else:
                    log.error("accepting a connection failed: %s", e)
                return
            conn.setblocking(False)
            self._adopt(conn)

    def _adopt(self, conn: socket.socket) -> None:
        try:
            # Runs until the transport awaits its connection_made: the transport is made in
            # this pass, the connection read from the next one on.
            task = start_eagerly(self.loop, self._connect(conn))
        except Exception:
            log.exception("could not take in an accepted connection")
            conn.close()
            return
        if task is not None:
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _connect(self, conn: socket.socket) -> Coroutine[Any, Any, None]:
        async def connect() -> None:
            try:
                await self.loop.connect_accepted_socket(self.factory, conn)
            except OSError as e:  # the client reset the connection before it was set up
                log.debug("an accepted connection failed at once: %s", e)
                conn.close()

        return connect()

    def close(self) -> None:
        """Stop accepting and close the listening sockets (connections stay open)."""
        if self._closed:
            return
        self._closed = True
        if self._paused is not None:
            self._paused.cancel()
        for sock in self.sockets:
            self.loop.remove_reader(sock.fileno())
            sock.close()


def listen(factory: Callable[[], asyncio.Protocol], host: str | None, port: int, backlog: int = 1024) -> Listener:
    """Bind every address ``host`` resolves to (all interfaces for None or ``""``) on ``port``
    and listen there, as ``loop.create_server`` does (``SO_REUSEADDR``; IPv6 sockets IPv6 only,
    so that an IPv4 socket can take the same port)."""
    loop = asyncio.get_running_loop()
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, type_, proto, _canon, addr in dict.fromkeys(infos):
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as e:
                raise OSError(e.errno, f"error while attempting to bind on address {addr!r}: {e.strerror}") from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return Listener(loop, factory, sockets)
