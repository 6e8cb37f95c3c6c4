"""The SSRF address policy: which resolved addresses a job's HTTP target may reach. Pure.

A scheduler calls URLs that tenants typed in, from inside the operator's network. Without a guard,
``http://169.254.169.254/`` reads the cloud metadata service and ``http://10.0.0.5:5432`` probes
the database. The rule: resolve the host, and refuse the target if
**any** address it resolves to is not a public unicast address. Checking every address (not just
the first) matters because the connection may fall back to a later one.

Host spellings that libc's ``inet_aton`` accepts (``2130706433``, ``0x7f000001``, ``127.1``,
``0177.0.0.1``) are parsed here the same way, so they are judged as the address they really are.
The resolver (``resolver.py``) hands the HTTP client exactly the addresses approved here, so DNS
rebinding between the check and the connect cannot swap it.

IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``) are judged by the embedded address; Teredo and the other IETF-special IPv6
blocks are refused outright.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from duetime.errors import DuetimeError

__all__ = [
    "IPAddress",
    "TargetRefused",
    "address_refusal",
    "check_addresses",
    "parse_ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(DuetimeError):
    """The target's address is not allowed (SSRF policy); retrying cannot help."""


def _v4(*nets: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network, str], ...]:
    return tuple((ipaddress.IPv4Network(net), why) for net, why in nets)


def _v6(*nets: tuple[str, str]) -> tuple[tuple[ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.IPv6Network(net), why) for net, why in nets)


# IANA IPv4 special-purpose registry, spelled out so the policy does not depend on the Python
# patch release (ipaddress.is_private/is_global changed in 3.11.10 and 3.12.4).
_V4_BLOCKED = _v4(
    ("0.0.0.0/8", "unspecified ('this network')"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT (shared address space)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (includes the cloud metadata service)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (includes broadcast)"),
)

_V6_BLOCKED = _v6(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments (includes Teredo)"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
_V6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, for the forms that route to one."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour
    return None


def address_refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be called, or None if it is a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "IPv6 address with a zone index"
        embedded = _embedded_v4(ip)
        if embedded is not None:
            inner = address_refusal(embedded)
            return f"IPv6 form of {embedded}: {inner}" if inner else None
        for net, why in _V6_BLOCKED:
            if ip in net:
                return why
        if ip not in _V6_GLOBAL_UNICAST:
            return "reserved (outside global unicast 2000::/3)"
    else:
        for net4, why in _V4_BLOCKED:
            if ip in net4:
                return why
    if not ip.is_global:  # belt and braces: anything the stdlib knows to be non-public
        return "not a public address"
    return None


def _inet_aton_part(text: str) -> int | None:
    """One component of a libc ``inet_aton`` address: decimal, 0-octal or 0x-hex."""
    if not text or not text.isascii():
        return None
    try:
        if text[:2].lower() == "0x":
            return int(text[2:], 16) if text[2:] else 0
        if len(text) > 1 and text[0] == "0":
            return int(text[1:], 8)
        return int(text, 10) if text.isdigit() else None
    except ValueError:
        return None


def _parse_inet_aton(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_inet_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    nums = [v for v in values if v is not None]
    # a.b.c.d; a.b.(16 bits); a.(24 bits); (32 bits) — the classic BSD forms.
    *head, last = nums
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    value = last
    for i, part in enumerate(head):
        value |= part << (24 - 8 * i)
    return ipaddress.IPv4Address(value)


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells directly (any ``inet_aton`` form or IPv6), else None.

    ``host`` may carry IPv6 brackets. Names (``example.com``) return None and need DNS.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    return _parse_inet_aton(text.rstrip(".")) if text else None


def check_addresses(host: str, addresses: Iterable[IPAddress]) -> list[IPAddress]:
    """Return ``addresses`` if every one of them may be called; raise ``TargetRefused`` if not.

    Refusing when *any* address is bad (rather than skipping it) keeps a name that mixes public
    and private records from being used as a coin toss against the internal network.
    """
    checked = list(addresses)
    if not checked:
        raise TargetRefused(f"target host {host!r} resolved to no address")
    for ip in checked:
        why = address_refusal(ip)
        if why is not None:
            shown = host if str(ip) == host else f"{host!r} resolves to {ip}, which"
            raise TargetRefused(
                f"target refused: {shown} is {why}; private targets are disabled "
                "(set DUETIME_ALLOW_PRIVATE_TARGETS=1 to allow them)"
            )
    return checked
