"""The fault tests' TCP proxy: passes bytes, holds them while cut off, delivers them on heal."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.fixtures.proxy import TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = TcpProxy("127.0.0.1", server.server_address[1])
    yield proxy
    proxy.close()
    server.shutdown()
    server.server_close()


def _echo(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = conn.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_bytes_pass_both_ways(proxy: TcpProxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as conn:
        assert _echo(conn, b"ping") == b"ping"
    assert proxy.mode == "pass"


def test_a_blackhole_holds_bytes_silently_and_a_heal_delivers_them(proxy: TcpProxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as conn:
        assert _echo(conn, b"before") == b"before"
        proxy.set_mode("blackhole")
        conn.settimeout(0.5)
        conn.sendall(b"held")
        with pytest.raises(TimeoutError):  # no answer and no error: a silent partition
            conn.recv(4096)
        # A new connection is accepted too, and is just as silent.
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as other:
            other.settimeout(0.5)
            other.sendall(b"x")
            with pytest.raises(TimeoutError):
                other.recv(4096)
        proxy.set_mode("pass")
        conn.settimeout(5)
        assert conn.recv(4096) == b"held"  # delivered late, after the heal


def test_an_unknown_mode_is_refused(proxy: TcpProxy) -> None:
    with pytest.raises(ValueError, match="unknown proxy mode"):
        proxy.set_mode("delay")
