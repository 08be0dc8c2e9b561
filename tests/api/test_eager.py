"""pylmq.api._eager: a coroutine runs at once and becomes a task only if it waits."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.api._eager import start_eagerly


async def test_a_coroutine_that_never_waits_finishes_without_a_task() -> None:
    seen: list[str] = []

    async def answer() -> None:
        seen.append("ran")

    assert start_eagerly(asyncio.get_running_loop(), answer()) is None
    assert seen == ["ran"], "it must have run to the end inside the call"


async def test_a_coroutine_that_waits_is_continued_by_a_task_with_the_results() -> None:
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    seen: list[object] = []

    async def answer() -> None:
        seen.append(await first)
        await asyncio.sleep(0)  # a bare yield in between
        seen.append(await second)

    task = start_eagerly(loop, answer())
    assert task is not None and seen == []
    first.set_result("one")
    await asyncio.sleep(0.01)
    second.set_result("two")
    await task
    assert seen == ["one", "two"]


async def test_an_exception_set_on_the_awaited_future_reaches_the_coroutine() -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    caught: list[BaseException] = []

    async def answer() -> None:
        try:
            await fut
        except KeyError as e:
            caught.append(e)

    task = start_eagerly(loop, answer())
    assert task is not None
    fut.set_exception(KeyError("gone"))
    await task
    assert [type(e) for e in caught] == [KeyError]


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    cleaned: list[str] = []

    async def answer() -> None:
        try:
            await fut
        finally:
            cleaned.append("finally ran")

    task = start_eagerly(loop, answer())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fut.cancelled() and cleaned == ["finally ran"]


async def test_an_error_in_the_first_step_propagates_to_the_caller() -> None:
    async def answer() -> None:
        raise ValueError("bad at once")

    with pytest.raises(ValueError, match="bad at once"):
        start_eagerly(asyncio.get_running_loop(), answer())
