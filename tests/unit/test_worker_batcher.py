"""The statement batcher when a caller bounds its wait: a timed-out request neither breaks the
batcher nor keeps its statement going for the batcher's full deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from duetime_workers.batcher import StatementBatcher
from duetime_workers.blocking import BlockingCalls


@pytest.fixture
async def calls() -> AsyncIterator[BlockingCalls]:
    pool = BlockingCalls(max_workers=4, name="test-batcher")
    yield pool
    pool.shutdown()


class HangOnce:
    """Doubles its requests; the first statement blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()  # the first statement is in flight
        self.statements: list[list[int]] = []

    def __call__(self, requests: Sequence[int]) -> list[int]:
        self.statements.append(list(requests))
        if len(self.statements) == 1:
            self.entered.set()
            self.release.wait()
        return [r * 2 for r in requests]


async def test_a_bounded_wait_ends_in_time_and_frees_the_statement_slot(
    calls: BlockingCalls,
) -> None:
    flush = HangOnce()
    # One statement at a time and a 10 s statement deadline: had the hanging statement kept its
    # 10 s, the second request would wait behind it and time out too.
    batcher: StatementBatcher[int, int] = StatementBatcher(flush, calls, timeout=10.0, parallel=1)
    batcher.start()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await batcher.submit(1, within=0.2)
        assert time.monotonic() - started < 1.0
        assert await batcher.submit(2, within=2.0) == 4
        assert flush.statements == [[1], [2]]
    finally:
        flush.release.set()
        await batcher.stop()


async def test_a_request_whose_caller_stopped_waiting_is_not_sent(calls: BlockingCalls) -> None:
    flush = HangOnce()
    batcher: StatementBatcher[int, int] = StatementBatcher(flush, calls, timeout=10.0, parallel=1)
    batcher.start()
    try:
        first = asyncio.create_task(batcher.submit(1))
        # The first statement in flight takes the only slot.
        assert await asyncio.to_thread(flush.entered.wait, 5.0)
        with pytest.raises(TimeoutError):
            await batcher.submit(2, within=0.1)  # queued behind it; its caller gives up
        late = asyncio.create_task(batcher.submit(3))
        await asyncio.sleep(0)  # queued before the slot frees
        flush.release.set()
        assert await first == 2
        assert await late == 6
        assert flush.statements == [[1], [3]]
    finally:
        flush.release.set()
        await batcher.stop()


class HangOn:
    """Doubles its requests; a statement holding ``stuck`` blocks until ``release`` is set."""

    def __init__(self, stuck: int) -> None:
        self.stuck = stuck
        self.release = threading.Event()

    def __call__(self, requests: Sequence[int]) -> list[int]:
        if self.stuck in requests:
            self.release.wait()
        return [r * 2 for r in requests]


async def test_each_bounded_wait_ends_at_its_own_deadline(calls: BlockingCalls) -> None:
    flush = HangOn(stuck=7)
    # Two statements at once: the one holding 7 hangs, the other answers.
    batcher: StatementBatcher[int, int] = StatementBatcher(flush, calls, timeout=10.0, parallel=2)
    batcher.start()
    try:
        late = asyncio.create_task(batcher.submit(7, within=0.3))
        await asyncio.sleep(0.05)  # 7's statement is in flight
        # Answered before its (earlier) deadline: it must not take the hung one's timer away.
        assert await batcher.submit(1, within=0.1) == 2
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await late
        assert time.monotonic() - started < 1.0
    finally:
        flush.release.set()
        await batcher.stop()


async def test_answered_bounded_waits_leave_no_timer_behind(calls: BlockingCalls) -> None:
    batcher: StatementBatcher[int, int] = StatementBatcher(
        lambda requests: [r * 2 for r in requests], calls, timeout=10.0
    )
    batcher.start()
    try:
        results = await asyncio.gather(*(batcher.submit(i, within=0.05) for i in range(500)))
        assert results == [i * 2 for i in range(500)]
        await asyncio.sleep(0.2)  # past every deadline: the timer came round once and stopped
        assert batcher._deadlines == []
        assert batcher._expiry is None
    finally:
        await batcher.stop()
