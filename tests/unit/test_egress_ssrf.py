"""The SSRF address policy: every spelling of an internal address is refused, public ones pass."""

from __future__ import annotations

import ipaddress

import pytest

from duetime.egress.ssrf import (
    TargetRefused,
    address_refusal,
    check_addresses,
    parse_ip_literal,
)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("169.254.169.254", "169.254.169.254"),
        ("0", "0.0.0.0"),
        ("8.8.8.8", "8.8.8.8"),
        ("8.8.8.8.", "8.8.8.8"),
    ],
)
def test_literal_spellings_parse_like_inet_aton(host: str, address: str) -> None:
    assert parse_ip_literal(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host", ["example.com", "1.2.3.08", "256.1.1.1", "1.2.3.4.5", "0x", "", "[::1", "1.2.3.0x1g"]
)
def test_names_and_invalid_literals_are_not_addresses(host: str) -> None:
    # "0x" alone is 0 for inet_aton; everything else here needs DNS (and fails there).
    if host == "0x":
        assert parse_ip_literal(host) == ipaddress.ip_address("0.0.0.0")
    else:
        assert parse_ip_literal(host) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.0.0.1", "private"),
        ("10.255.255.255", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.255", "carrier-grade NAT"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.1.2.3", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378::1", "Teredo"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("fec0::1", "site-local"),
        ("2001:db8::1", "documentation"),
        ("4000::1", "reserved"),
    ],
)
def test_internal_addresses_are_refused(address: str, reason: str) -> None:
    why = address_refusal(ipaddress.ip_address(address))
    assert why is not None and reason in why


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.63.255.255",  # just below CGNAT
        "100.128.0.0",  # just above CGNAT
        "172.15.255.255",
        "172.32.0.0",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "[::1]",
        "0x7f000001",
        "2130706433",
        "127.1",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
        "10.0.0.1",
        "100.64.0.1",
    ],
)
def test_literal_targets_are_refused(host: str) -> None:
    ip = parse_ip_literal(host)
    assert ip is not None
    with pytest.raises(TargetRefused, match="DUETIME_ALLOW_PRIVATE_TARGETS"):
        check_addresses(host, [ip])


def test_a_name_is_refused_if_any_address_is_internal() -> None:
    mixed = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.7")]
    with pytest.raises(TargetRefused, match=r"'rebind\.example' resolves to 10\.0\.0\.7"):
        check_addresses("rebind.example", mixed)


def test_a_public_name_passes_with_all_its_addresses() -> None:
    found = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:2800::1")]
    assert check_addresses("example.com", found) == found


def test_no_address_is_refused() -> None:
    with pytest.raises(TargetRefused, match="no address"):
        check_addresses("empty.example", [])


def test_scoped_ipv6_is_refused() -> None:
    assert address_refusal(ipaddress.IPv6Address("2606:4700::1%eth0")) is not None
