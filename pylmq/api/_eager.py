"""Run a request's coroutine at once, and make it a task only if it has to wait.

Most requests on a node never wait: a push, a pull of a queued message or an ack on the memory
store run to their answer without suspending. Creating a task for each costs a task object, a
trip through the loop's ready queue and the weak set of all tasks: a measurable part of a
request's CPU (docs/decisions/eager-requests.md). Python 3.12's eager task factory does the same;
pylmq supports 3.11.

The coroutine's first step runs in the caller (a protocol callback, so no task is current
during it: code on the request path must not need ``asyncio.current_task()``). If it suspends,
a task continues it from where it stands: it waits on what the coroutine waits on, and passes
results and exceptions (a cancellation among them) into the coroutine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["start_eagerly"]


class _Await:
    """Yields what the coroutine yielded (a future, or None for a bare yield) to the task
    running :func:`_continue`, so the task waits on it as the coroutine would have."""

    __slots__ = ("what",)

    def __init__(self, what: Any) -> None:
        self.what = what

    def __await__(self) -> Generator[Any, None, None]:
        yield self.what


async def _continue(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    while True:
        try:
            await _Await(waiting_on)
        except BaseException as e:  # the task was cancelled: the coroutine decides what that means
            try:
                waiting_on = coro.throw(e)
            except StopIteration:
                return
            continue
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None], name: str | None = None
) -> asyncio.Task[None] | None:
    """Run ``coro`` up to its first suspension; the task that finishes it, or None when it
    finished at once. An exception it raises in that first step propagates to the caller."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return loop.create_task(_continue(coro, waiting_on), name=name)
