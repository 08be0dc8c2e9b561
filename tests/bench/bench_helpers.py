"""Helpers shared by the tests of the bench's sections."""

from __future__ import annotations

from bench.drivers import Driver


async def run_cycles(d: Driver, queue: str, handle_type: type, rounds: int = 3) -> None:
    """Push, pull and ack one message ``rounds`` times through ``d``, each pull handing back a
    ``handle_type`` handle; the queue is empty after."""
    for _ in range(rounds):
        await d.push(queue, b"x" * 100)
        handle = await d.pull(queue, 0)
        assert isinstance(handle, handle_type), handle
        await d.ack(queue, handle)
    assert await d.pull(queue, 0) is None
