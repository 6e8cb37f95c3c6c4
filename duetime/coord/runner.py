"""Run a ``ShardOwnership`` on its own thread and event loop, next to a synchronous service.

aetcd is asyncio and the planner's loop is not; the backend is created inside the thread's loop
(grpc.aio channels belong to the loop that made them). ``stop()`` revokes the lease, so a planner
that stops cleanly hands its shards over at once instead of after the TTL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from duetime.logs import event

from .backend import ShardLeaseBackend
from .ownership import OwnershipConfig, ShardOwnership

__all__ = ["OwnershipThread"]

log = logging.getLogger("duetime.coord")


class OwnershipThread:
    def __init__(
        self,
        backend_factory: Callable[[], ShardLeaseBackend],
        member: str,
        config: OwnershipConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = backend_factory
        self._member = member
        self._config = config
        self._monotonic = monotonic
        self._ownership: ShardOwnership | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="shard-ownership", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def current(self, now: float) -> dict[int, int]:
        ownership = self._ownership
        return {} if ownership is None else dict(ownership.current(now))

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        backend = self._factory()
        ownership = ShardOwnership(backend, self._member, self._config)
        self._ownership = ownership
        self._ready.set()
        poll = self._config.poll_interval.total_seconds()
        try:
            while not self._stopping.is_set():
                try:
                    await ownership.step(self._monotonic())
                except Exception as exc:
                    # A bug must not end the thread: the planner would idle without a word. The
                    # shards stop by themselves (no keepalive) until a round succeeds again.
                    event(log, "shards.round_failed", logging.ERROR, error=repr(exc))
                await asyncio.sleep(poll)
        finally:
            await ownership.stop()
            await backend.close()
