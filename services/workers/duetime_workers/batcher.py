"""Many attempts' database requests, one statement per batch.

Each attempt awaits ``submit(request)`` as if it made its own call; the batcher gathers everything
submitted while the previous statement was in flight and sends it as one statement
(``runs_claim_batch``, ``runs_complete_batch``). Under load the batches grow by themselves, with no
timer: a spike of 20k runs becomes a few dozen statements instead of 40k transactions. At rest a
lone request goes out at once, so nothing waits for a batch to fill.

A failed statement fails every request in it with the same exception; each attempt then retries
on its own terms (its claim deadline, its lease), and the retries batch again.

A caller may bound its own wait (``submit(request, within=...)``: a completion may not outlast
its lease). It then gets ``TimeoutError`` when that time is up, its request is dropped from the
batch if it has not gone out yet, and a statement carrying only bounded requests is given no
longer than the longest of their waits: nobody is left to hear its answer after that.

The bounded waits share one timer: their deadlines go on a heap, and a single loop callback,
set for the earliest deadline still awaited, fails what is due with ``TimeoutError``. (One
``asyncio.wait_for`` per request cost a timer, a waiter future and callbacks for every
completion of every run.) Most requests are answered long before their deadline; the callback
drops those from the heap when it comes round, so it fires about once per wait, not per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from .blocking import BlockingCalls

__all__ = ["StatementBatcher"]

Req = TypeVar("Req")
Res = TypeVar("Res")


class StatementBatcher(Generic[Req, Res]):
    """Runs ``flush(requests) -> results`` (same order) on the database pool, batching callers.

    Args:
        flush: the blocking batch call; returns one result per request, in order.
        calls: the thread pool with client-side deadlines.
        timeout: the deadline of one statement (seconds).
        max_batch: the most requests in one statement.
        parallel: statements of this kind in flight at once (a slow one does not stall all).
    """

    def __init__(
        self,
        flush: Callable[[Sequence[Req]], Sequence[Res]],
        calls: BlockingCalls,
        *,
        timeout: float,
        max_batch: int = 2000,
        parallel: int = 2,
    ) -> None:
        self._flush = flush
        self._calls = calls
        self._timeout = timeout
        self._max_batch = max_batch
        self._parallel = parallel
        # (request, its result, the loop time its caller stops waiting; inf: the statement's own)
        self._pending: list[tuple[Req, asyncio.Future[Res], float]] = []
        self._ready: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # The bounded waits: (deadline, tie-breaker, future), earliest first; one timer for all.
        self._deadlines: list[tuple[float, int, asyncio.Future[Res]]] = []
        self._order = itertools.count()
        self._expiry: asyncio.TimerHandle | None = None
        self.statements = 0  # how many statements were sent (tests and stats read it)

    def start(self) -> None:
        self._ready = asyncio.Event()
        self._tasks = [asyncio.create_task(self._serve()) for _ in range(self._parallel)]

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._deadlines.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, future, _ in self._pending:
            if not future.done():
                future.cancel()
        self._pending.clear()

    async def submit(self, request: Req, within: float | None = None) -> Res:
        """The result for ``request``; raises what its statement raised.

        Args:
            request: one row of the next statement.
            within: the most the caller waits (seconds), from now, queueing included; then
                ``TimeoutError``. None: only the statement's own deadline applies.
        """
        if self._ready is None:
            raise RuntimeError("StatementBatcher.start() was not called")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Res] = loop.create_future()
        if within is None:
            self._pending.append((request, future, math.inf))
            self._ready.set()
            return await future
        deadline = loop.time() + max(min(within, self._timeout), 0.001)
        self._pending.append((request, future, deadline))
        self._ready.set()
        # When the deadline passes first, _expire fails the future: _serve then skips the
        # request, or drops its result.
        heapq.heappush(self._deadlines, (deadline, next(self._order), future))
        if self._expiry is None or deadline < self._expiry.when():
            self._arm(loop, deadline)
        return await future

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = loop.call_at(when, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the bounded waits whose deadline has passed; re-arm for the next one."""
        self._expiry = None
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done()):
            future = heapq.heappop(deadlines)[2]
            if not future.done():
                future.set_exception(TimeoutError())
        if deadlines:
            self._arm(loop, deadlines[0][0])

    async def _serve(self) -> None:
        assert self._ready is not None
        ready = self._ready
        while True:
            await ready.wait()
            # One pass of the loop lets every attempt started in the same step submit first.
            await asyncio.sleep(0)
            batch = [(r, f, d) for r, f, d in self._pending[: self._max_batch] if not f.done()]
            del self._pending[: self._max_batch]
            if not self._pending:
                ready.clear()
            if not batch:
                continue
            self.statements += 1
            now = asyncio.get_running_loop().time()
            longest_wait = max(deadline for _, _, deadline in batch) - now
            try:
                results = await self._calls.call(
                    min(self._timeout, longest_wait),
                    self._flush,
                    [request for request, _, _ in batch],
                )
            except asyncio.CancelledError:
                for _, future, _ in batch:
                    future.cancel()
                raise
            except Exception as exc:  # StoreError, TimeoutError, or a bug: the callers decide
                for _, future, _ in batch:
                    if not future.done():  # its caller may have stopped waiting
                        future.set_exception(exc)
                continue
            for (_, future, _), result in zip(batch, results, strict=True):
                if not future.done():  # its caller may have stopped waiting
                    future.set_result(result)
