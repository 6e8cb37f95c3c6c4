"""The spike benchmark's HTTP target: answers 200 as fast as it can and records every request.

Run as its own process (``python -m bench.spike_http_target OUT``) so it does not share an
interpreter, and its GIL, with the benchmark. It speaks just enough HTTP/1.1 by hand on asyncio
(keep-alive, pipelining, ``Content-Length`` bodies): a framework would cost more CPU per request
than the scheduler under test on a 2-core box.

Protocol with the parent (lines on stdout): ``port N`` once listening, then ``count N`` about four
times a second. When stdin closes (or receives a line), it writes one line per request to OUT
(:func:`bench.spike_recorder.write_arrivals`) and prints ``done``.

Per request it keeps only the arrival time (``time.time()`` when the bytes were read) and the raw
header block; headers are parsed after the run, off the measured path.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

from bench.spike_recorder import Arrival, parse_instant, print_line, write_arrivals

__all__ = ["main"]

_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nKeep-Alive: timeout=120\r\n\r\n"
_REQUESTS: list[tuple[float, bytes]] = []


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buffer = self._buffer + data if self._buffer else data
        answered = 0
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[:end]
            total = end + 4 + _content_length(head)
            if len(buffer) < total:
                break
            _REQUESTS.append((now, head))
            buffer = buffer[total:]
            answered += 1
        self._buffer = buffer
        if answered and self._transport is not None:
            self._transport.write(_RESPONSE * answered)


def _content_length(head: bytes) -> int:
    lowered = head.lower()
    at = lowered.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    start = at + len(b"\r\ncontent-length:")
    stop = lowered.find(b"\r\n", start)
    return int(lowered[start : stop if stop >= 0 else None].strip() or b"0")


def _arrival(arrived_at: float, head: bytes) -> Arrival | None:
    fields: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    run_id = fields.get("x-duetime-run-id")
    scheduled = fields.get("x-duetime-scheduled-for")
    if not run_id or not scheduled:
        return None
    attempt = int(fields.get("x-duetime-attempt", "0") or 0)
    return Arrival(run_id, attempt, parse_instant(scheduled), arrived_at, None)


async def _serve(out: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Connection, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print_line(f"port {port}")
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    while not stop.is_set():
        print_line(f"count {len(_REQUESTS)}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    server.close()
    arrivals = [a for a in (_arrival(t, head) for t, head in _REQUESTS) if a is not None]
    write_arrivals(out, arrivals)
    print_line(f"done {len(arrivals)}")


def main() -> None:
    asyncio.run(_serve(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
