"""The clock's timers: the system clock's run on the event loop, the manual clock's only when
the test moves it, in the order they fall due."""

from __future__ import annotations

import asyncio

from pylmq.core.clock import ManualClock, SystemClock


def test_manual_timers_run_only_once_the_clock_reaches_them() -> None:
    clock = ManualClock(100.0)
    ran: list[float] = []
    clock.call_later(5.0, lambda: ran.append(clock.now()))
    clock.advance(4.999)
    assert ran == [] and clock.pending() == 1
    clock.advance(0.001)
    assert ran == [105.0] and clock.pending() == 0


def test_manual_timers_run_in_due_order_each_at_its_due_time() -> None:
    clock = ManualClock(0.0)
    ran: list[tuple[str, float]] = []
    for name, delay in (("c", 3.0), ("a", 1.0), ("b1", 2.0), ("b2", 2.0)):
        clock.call_later(delay, lambda n=name: ran.append((n, clock.now())))
    clock.advance(10.0)
    assert ran == [("a", 1.0), ("b1", 2.0), ("b2", 2.0), ("c", 3.0)], "due order, ties in the order set"
    assert clock.now() == 10.0


def test_a_timer_set_by_a_timer_runs_in_the_same_advance_if_due_by_its_end() -> None:
    clock = ManualClock(0.0)
    ran: list[float] = []

    def first() -> None:
        ran.append(clock.now())
        clock.call_later(2.0, lambda: ran.append(clock.now()))
        clock.call_later(20.0, lambda: ran.append(clock.now()))

    clock.call_later(1.0, first)
    clock.advance(5.0)
    assert ran == [1.0, 3.0] and clock.pending() == 1


def test_a_cancelled_timer_never_runs_and_cancel_after_running_is_harmless() -> None:
    clock = ManualClock(0.0)
    ran: list[str] = []
    dropped = clock.call_later(1.0, ran.append, "dropped")
    kept = clock.call_later(1.0, ran.append, "kept")
    dropped.cancel()
    assert clock.pending() == 1
    clock.advance(1.0)
    kept.cancel()
    assert ran == ["kept"] and clock.pending() == 0


def test_setting_the_clock_back_runs_nothing() -> None:
    clock = ManualClock(100.0)
    ran: list[str] = []
    clock.call_later(1.0, ran.append, "t")
    clock.set(50.0)
    clock.set(100.5)
    assert ran == []
    clock.set(101.0)
    assert ran == ["t"]


async def test_system_timers_run_on_the_event_loop() -> None:
    loop = asyncio.get_running_loop()
    fired = loop.create_future()
    handle = SystemClock().call_later(0.001, fired.set_result, "fired")
    assert isinstance(handle, asyncio.TimerHandle), "delegated to the loop, cancellable there"
    assert await asyncio.wait_for(fired, 5) == "fired"
    ran: list[str] = []
    SystemClock().call_later(0.001, ran.append, "cancelled").cancel()
    await asyncio.sleep(0.01)  # real time: the system clock's timers run on the wall clock
    assert ran == []
