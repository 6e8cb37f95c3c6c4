"""Loopback TCP ports for the embedded stack.

Ports are picked at random **below** the kernel's ephemeral range (``ip_local_port_range``,
usually 32768-60999). Inside that range, any outgoing connection may take a port as its source
port the moment a server lets go of it, so a server restarted after a crash could find its old
port busy; below it, only another server binding that exact number can. The pick is random (from
the OS's entropy, immune to tests that seed ``random``) so parallel test workers do not collide;
between the probe and the server's bind there is a small window, and a server that loses that
race fails to start with an error that names the port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["LOOPBACK", "find_free_port", "port_accepts", "port_is_free"]

LOOPBACK = "127.0.0.1"
# Below this are well-known and commonly configured ports (5432, 8080, 9092, 2379, ...).
_LOWEST = 15000
_ATTEMPTS = 50
_RANDOM = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def find_free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that nothing uses right now, outside the ephemeral range."""
    highest = _ephemeral_low() - 1
    if highest - _LOWEST >= 1000:
        for _ in range(_ATTEMPTS):
            port = _RANDOM.randint(_LOWEST, highest)
            if port_is_free(port, host, reuse_address=False):
                return port
    # A host whose ephemeral range starts low: let the kernel choose.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def port_is_free(port: int, host: str = LOOPBACK, *, reuse_address: bool = True) -> bool:
    """Whether a server could bind ``port`` now.

    With ``reuse_address`` (``SO_REUSEADDR``, which PostgreSQL, etcd and tansu set) connections
    of a process that just exited (TIME_WAIT) do not make the port look busy, so a restart keeps
    its port; without it, a new pick avoids such ports altogether.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_accepts(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``port`` (a cheap check before a real probe)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
