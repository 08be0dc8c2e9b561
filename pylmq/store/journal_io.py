"""The durable store's system calls and its two journal threads.

:class:`JournalIO` is the one seam through which the store writes and watches its disk;
:class:`Worker` runs the journal's other blocking calls in order on one thread; :class:`Syncer`
``fdatasync``s on another, one sync for every group written while the previous one ran (see
:mod:`pylmq.store.durable` for how the store uses them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pylmq.store.check import write_all

__all__ = ["JournalIO", "Syncer", "Worker", "fdatasync"]

fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class JournalIO:
    """The system calls through which the store writes its journal and watches its disk: one
    seam where a test puts a full disk or a failing device and nothing else changes."""

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        write_all(fd, data)

    def fdatasync(self, fd: int) -> None:
        fdatasync(fd)

    def free_bytes(self, path: Path) -> int:
        """Bytes a writer that is not root may still use on ``path``'s file system."""
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize


_T = TypeVar("_T")


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


class Worker:
    """One thread that runs the journal's blocking calls in order (recovery, installing a
    compacted segment, the last sync on close) and hands each result to the loop: a queue and
    ``call_soon_threadsafe``, where ``run_in_executor`` on a ThreadPoolExecutor adds a
    concurrent future, a lock, a work item and an asyncio future chained to it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]] | None]
        self._jobs = queue.SimpleQueue()
        # A daemon: a loop that ends without close() must not keep the process alive.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        fut: asyncio.Future[_T] = self._loop.create_future()
        self._jobs.put((fut, fn, args))
        return fut

    def _run(self) -> None:
        jobs, reply = self._jobs, self._loop.call_soon_threadsafe
        while (job := jobs.get()) is not None:
            fut, fn, args = job
            try:
                result, error = fn(*args), None
            except BaseException as e:
                result, error = None, e
            try:
                reply(_settle, fut, result, error)
            except RuntimeError:
                return  # the loop is closed: nobody is left to tell
            # Nothing of the job stays referenced while the thread waits for the next one.
            del job, fut, args, result, error

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join()


class Syncer:
    """A thread that ``fdatasync``s the journal up to where the loop has written it.

    The loop writes each group itself (:meth:`~pylmq.store.durable.DurableStore._write_out`, a copy into the page
    cache) and asks for a sync of the bytes up to its end; the thread takes every request made
    while it synced the previous time as one, so one ``fdatasync`` covers all the groups written
    meanwhile. Results come back through an eventfd the loop watches: per sync, one system call
    on each side and no Python code on the loop but the reply.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_synced: Callable[[int, BaseException | None], None],
        sync: Callable[[int], None] = fdatasync,
    ) -> None:
        self._loop = loop
        self._on_synced = on_synced
        self._sync = sync
        self._requests: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._done: collections.deque[tuple[int, BaseException | None]] = collections.deque()
        # Linux; elsewhere replies go through call_soon_threadsafe.
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if hasattr(os, "eventfd") else -1
        if self._efd >= 0:
            loop.add_reader(self._efd, self._drain)
        # A daemon: a loop that ends without close() must not keep the process alive.
        self._thread = threading.Thread(target=self._run, name="pylmq-journal-sync", daemon=True)
        self._thread.start()

    def request(self, fd: int, end: int) -> None:
        """Sync ``fd``; ``end`` (a position in the journal's bytes) comes back when it is done."""
        self._requests.put((fd, end))

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._efd)
        self._reply()

    def _reply(self) -> None:
        done, on_synced = self._done, self._on_synced
        while done:
            on_synced(*done.popleft())

    def _run(self) -> None:
        get, get_nowait, done, efd, sync = (
            self._requests.get,
            self._requests.get_nowait,
            self._done,
            self._efd,
            self._sync,
        )
        req = get()
        stopping = req is None
        while req is not None:
            fd, end = req
            req = None
            # Requests made meanwhile for the same file: one sync covers them all.
            while True:
                try:
                    nxt = get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                if nxt[0] != fd:
                    req = nxt  # another segment's: synced next
                    break
                end = nxt[1]
            try:
                sync(fd)
                error: BaseException | None = None
            except BaseException as e:
                error = e
            done.append((end, error))
            if efd >= 0:
                os.eventfd_write(efd, 1)
            else:
                self._loop.call_soon_threadsafe(self._reply)
            del error
            if req is None and not stopping:
                req = get()
                stopping = req is None

    def shutdown(self) -> None:
        self._requests.put(None)
        self._thread.join()
        if self._efd >= 0:
            self._loop.remove_reader(self._efd)
            os.close(self._efd)
        self._reply()
