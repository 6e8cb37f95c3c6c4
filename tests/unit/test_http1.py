"""The worker's HTTP/1.1 client against a scripted server on a real socket.

The server answers each request with whatever the test's script returns for (connection number,
request number on that connection, request head); ``None`` closes the connection unanswered.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from yarl import URL

from duetime.egress.resolver import GuardedResolver
from duetime.egress.ssrf import IPAddress, TargetRefused
from duetime_workers.http1 import Http1Client, ResponseError, ServerDisconnected

Script = Callable[[int, int, bytes], bytes | None]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


@dataclass
class _Scripted:
    script: Script
    port: int = 0
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            for index in range(1_000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.bodies.append(await reader.readexactly(length) if length else b"")
                answer = self.script(number, index, head)
                if answer is None:
                    return
                if answer.startswith(b"sleep "):
                    await asyncio.sleep(float(answer.split()[1]))
                    answer = OK
                writer.write(answer)
                await writer.drain()
        finally:
            self.open_now -= 1
            writer.close()


Serve = Callable[[Script], Awaitable[_Scripted]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> _Scripted:
        state = _Scripted(script)
        server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
        servers.append(server)
        state.port = server.sockets[0].getsockname()[1]
        return state

    yield start
    for server in servers:
        server.close()


async def _loopback(host: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address("127.0.0.1")]


def _client(max_connections: int = 8, *, allow_private: bool = True) -> Http1Client:
    return Http1Client(
        GuardedResolver(allow_private=allow_private, resolver=_loopback),
        max_connections=max_connections,
        ssl_context=ssl.create_default_context(),
    )


def _url(state: _Scripted, path: str = "/hook") -> URL:
    return URL(f"http://127.0.0.1:{state.port}{path}")


async def test_a_keep_alive_connection_serves_the_next_request(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client()
    try:
        for _ in range(5):
            response = await client.request("POST", _url(state), [("X-A", "1")], b"{}")
            assert response.status == 200
    finally:
        await client.aclose()
    assert state.connections == 1


async def test_the_request_carries_host_framing_and_url_credentials(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client()
    url = URL(f"http://user:pa%20ss@127.0.0.1:{state.port}/a/b?x=1%202")
    try:
        await client.request("POST", url, [("X-Job", "v")], None)
        await client.request("PUT", _url(state), [], b"body")
        await client.request("GET", _url(state), [], None)
    finally:
        await client.aclose()
    first, second, third = (head.decode() for head in state.heads)
    assert first.startswith("POST /a/b?x=1%202 HTTP/1.1\r\n")
    assert f"\r\nHost: 127.0.0.1:{state.port}\r\n" in first
    assert "\r\nX-Job: v\r\n" in first
    assert "\r\nContent-Length: 0\r\n" in first
    assert "\r\nAuthorization: Basic dXNlcjpwYSBzcw==\r\n" in first  # user:pa ss
    assert "\r\nContent-Type: application/octet-stream\r\n" in second
    assert state.bodies[1] == b"body"
    assert "Content-Length" not in third


async def test_credentials_in_the_url_and_an_authorization_header_are_refused(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client()
    url = URL(f"http://u:p@127.0.0.1:{state.port}/")
    try:
        with pytest.raises(ValueError, match="credentials"):
            await client.request("GET", url, [("Authorization", "Bearer x")], None)
    finally:
        await client.aclose()


async def test_an_invalid_method_is_refused_before_connecting(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client()
    try:
        with pytest.raises(ValueError, match="invalid method"):
            await client.request("GET /x HTTP/1.1\r\n", _url(state), [], None)
    finally:
        await client.aclose()
    assert state.connections == 0


@pytest.mark.parametrize(
    ("answer", "reused"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n", True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", True),
    ],
)
async def test_a_connection_is_reused_only_after_a_framed_answer(
    serve: Serve, answer: bytes, reused: bool
) -> None:
    state = await serve(lambda c, i, h: answer)
    client = _client()
    try:
        for _ in range(2):
            response = await client.request("GET", _url(state), [], None)
            assert response.status in (200, 204)
    finally:
        await client.aclose()
    assert state.connections == (1 if reused else 2)


async def test_a_body_arriving_after_the_head_is_dropped_before_reuse(serve: Serve) -> None:
    body = b"x" * 200_000  # several reads

    def script(c: int, i: int, head: bytes) -> bytes:
        return b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 200000\r\n\r\n" + body

    state = await serve(script)
    client = _client()
    try:
        first = await client.request("GET", _url(state), [], None)
        await asyncio.sleep(0.1)  # the rest of the body arrives and is dropped
        second = await client.request("GET", _url(state), [], None)
    finally:
        await client.aclose()
    assert (first.status, first.reason, first.retry_after) == (503, "Busy", "7")
    assert second.status == 503
    assert state.connections == 1


async def test_head_answers_have_no_body_whatever_their_length_says(serve: Serve) -> None:
    state = await serve(lambda c, i, h: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    client = _client()
    try:
        for _ in range(3):
            assert (await client.request("HEAD", _url(state), [], None)).status == 200
    finally:
        await client.aclose()
    assert state.connections == 1


async def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_once_more(
    serve: Serve,
) -> None:
    # Connection 0 answers its first request, then closes on the second without answering.
    state = await serve(lambda c, i, h: OK if (c, i) != (0, 1) else None)
    client = _client()
    try:
        assert (await client.request("POST", _url(state), [], b"1")).status == 200
        assert (await client.request("POST", _url(state), [], b"2")).status == 200
    finally:
        await client.aclose()
    assert state.connections == 2
    assert state.bodies == [b"1", b"2", b"2"]


async def test_a_new_connection_closed_before_answering_is_an_error(serve: Serve) -> None:
    state = await serve(lambda c, i, h: None)
    client = _client()
    try:
        with pytest.raises(ServerDisconnected):
            await client.request("POST", _url(state), [], b"1")
    finally:
        await client.aclose()
    assert state.bodies == [b"1"]  # sent once: a fresh connection is not retried


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000, "response head over"),
    ],
)
async def test_answers_that_are_not_http_are_response_errors(
    serve: Serve, answer: bytes, why: str
) -> None:
    state = await serve(lambda c, i, h: answer)
    client = _client()
    try:
        with pytest.raises(ResponseError, match=why):
            await client.request("GET", _url(state), [], None)
    finally:
        await client.aclose()


async def test_a_cancelled_exchange_closes_its_connection(serve: Serve) -> None:
    state = await serve(lambda c, i, h: b"sleep 0.5" if i == 0 else OK)
    client = _client()
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.request("GET", _url(state), [], None)
        assert (await client.request("GET", _url(state), [], None)).status == 200
    finally:
        await client.aclose()
    assert state.connections == 2  # the late answer never reaches the next request


async def test_requests_in_flight_are_bounded_by_max_connections(serve: Serve) -> None:
    state = await serve(lambda c, i, h: b"sleep 0.05")
    client = _client(max_connections=2)
    try:
        answers = await asyncio.gather(
            *(client.request("GET", _url(state), [], None) for _ in range(8))
        )
    finally:
        await client.aclose()
    assert [a.status for a in answers] == [200] * 8
    assert state.most_open <= 2


async def test_every_address_of_a_host_is_tried_in_order(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)

    async def two(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")]

    client = Http1Client(
        GuardedResolver(allow_private=True, resolver=two),
        max_connections=2,
        ssl_context=ssl.create_default_context(),
    )
    try:
        response = await client.request("GET", URL(f"http://svc.test:{state.port}/"), [], None)
    finally:
        await client.aclose()
    assert response.status == 200  # 127.0.0.2 refused the connection; 127.0.0.1 answered
    assert f"\r\nHost: svc.test:{state.port}\r\n" in state.heads[0].decode()


async def test_the_ssrf_policy_refuses_before_any_connection(serve: Serve) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client(2, allow_private=False)
    try:
        with pytest.raises(TargetRefused):
            await client.request("GET", URL(f"http://svc.test:{state.port}/"), [], None)
    finally:
        await client.aclose()
    assert state.connections == 0


async def test_a_body_that_never_ends_costs_its_connection_not_a_leak(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("duetime_workers.http1._BODY_DEADLINE", 0.1)
    state = await serve(lambda c, i, h: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
    client = _client()
    try:
        assert (await client.request("GET", _url(state), [], None)).status == 200
        await asyncio.sleep(0.3)  # the rest of the body never comes: the connection is aborted
        assert (await client.request("GET", _url(state), [], None)).status == 200
    finally:
        await client.aclose()
    assert state.connections == 2


async def test_connections_opened_ahead_serve_the_first_requests(serve: Serve) -> None:
    """A warm-up opens connections until as many as asked are idle (at most the idle cap), and
    the requests that follow use them instead of connecting."""
    state = await serve(lambda c, i, h: OK)
    client = _client(max_connections=4)
    try:
        assert await client.prewarm(_url(state), 3) == 3
        assert await client.prewarm(_url(state), 3) == 0  # already idle
        assert await client.prewarm(_url(state), 10) == 1  # the idle cap
        responses = await asyncio.gather(
            *(client.request("GET", _url(state), [], None) for _ in range(4))
        )
        assert [r.status for r in responses] == [200] * 4
    finally:
        await client.aclose()
    assert state.connections == 4


async def test_a_warm_up_the_policy_refuses_opens_nothing_and_raises_nothing(
    serve: Serve,
) -> None:
    state = await serve(lambda c, i, h: OK)
    client = _client(2, allow_private=False)
    try:
        assert await client.prewarm(URL(f"http://svc.test:{state.port}/"), 2) == 0
    finally:
        await client.aclose()
    assert state.connections == 0
