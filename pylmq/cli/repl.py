"""``bin/lmq console``: an interactive Python console next to a running node.

The node keeps running on its event loop in the main thread; the console reads stdin in its own
thread. Names bound in the console: ``service``, ``node`` (the LMQNode), ``manager``, ``store``,
``metrics``, ``dist`` (the Erlang distribution node, or None), ``loop``, and ``call(coro)``,
which runs a coroutine on the node's loop and returns its result (``call(manager.push(...))``).
End of input (Ctrl-D) stops the node, as ``q().`` does in an Erlang console.
"""

from __future__ import annotations

import asyncio
import code
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from pylmq.node.service import Service

__all__ = ["start_console"]

T = TypeVar("T")

BANNER = (
    "pylmq console on node {name}. Bound: service, node, manager, store, metrics, dist, loop,\n"
    "call(coro) runs a coroutine on the node's loop. Ctrl-D stops the node."
)


def start_console(service: Service, loop: asyncio.AbstractEventLoop) -> threading.Thread:
    def call(coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    names: dict[str, object] = {
        "service": service,
        "node": service.node,
        "manager": service.node.manager,
        "store": service.node.store,
        "metrics": service.metrics,
        "dist": service.dist,
        "loop": loop,
        "call": call,
    }

    def run() -> None:
        try:
            code.InteractiveConsole(names).interact(banner=BANNER.format(name=service.node_name), exitmsg="")
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(service.stopped.set)

    # daemon: a console blocked in input() must not keep the process alive once the node stopped
    thread = threading.Thread(target=run, name="pylmq-console", daemon=True)
    thread.start()
    return thread
