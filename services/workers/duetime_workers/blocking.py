"""Blocking database calls from the event loop, each with a client-side deadline.

The store is synchronous (SQLAlchemy + psycopg), so its calls run on a thread pool. The deadline
is the important part: during a silent network partition a statement neither fails nor returns
(a heartbeat was seen to hang that way), and a worker that waits on it can never notice
that its lease ran out. ``asyncio.wait_for`` gives up on the call; the thread itself stays blocked
until libpq's keepalives or the server's timeouts end it, which is why the pool is sized with
room to spare.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["BlockingCalls"]

T = TypeVar("T")


class BlockingCalls:
    """A thread pool for blocking calls that the event loop awaits with a deadline."""

    def __init__(self, max_workers: int, name: str = "duetime-db") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)

    async def call(self, within: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the pool; raise ``TimeoutError`` after ``within`` s."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        return await asyncio.wait_for(future, timeout=max(within, 0.001))

    def shutdown(self) -> None:
        """Stop accepting work; calls stuck on a dead connection are not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)
