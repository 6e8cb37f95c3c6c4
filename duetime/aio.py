"""Small asyncio helpers shared by the services."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` have passed; True if it is set.

    Through ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11 ``wait_for`` returns
    normally when its inner wait completes in the same step as a cancellation of the caller
    (a stop that sets the event and cancels the loop waiting on it), swallowing the
    cancellation; a loop around it then goes on instead of ending. ``wait_for`` also costs a
    task per wait.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
