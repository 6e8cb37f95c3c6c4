"""Health probes: one real round trip per protocol, used for embedded and external servers alike.

An open port says little (PostgreSQL accepts connections while it is still recovering; tansu
accepts before it answers metadata), so each probe speaks the protocol: ``select 1`` over
psycopg, a Metadata request over librdkafka, etcd's ``/health``, an S3 ``GET /``. The drivers
are imported inside the probes so that importing this package stays cheap for the CLI.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from duetime_infra.ports import port_accepts

__all__ = ["etcd_endpoint_urls", "probe_etcd", "probe_kafka", "probe_postgres", "probe_s3"]


def probe_postgres(url: str, timeout: float = 2.0) -> bool:
    """``select 1`` over a fresh connection."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
            row = conn.execute("select 1").fetchone()
            return row == (1,)
    except psycopg.Error:
        return False


def _bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port`` pairs of a ``bootstrap.servers`` list (``PROTOCOL://`` prefixes allowed)."""
    addresses = []
    for raw in bootstrap.split(","):
        entry = raw.strip().rsplit("://", 1)[-1]
        host, _, port = entry.rpartition(":")
        if host and port.isdigit():
            addresses.append((host.strip("[]"), int(port)))
    return addresses


def probe_kafka(bootstrap: str, timeout: float = 2.0) -> bool:
    """A Metadata request that names at least one broker.

    ``list_topics()`` without a topic never auto-creates one, so probing leaves no trace. A
    plain TCP connect goes first: when nothing listens, librdkafka would otherwise spend the
    whole timeout retrying.
    """
    addresses = _bootstrap_addresses(bootstrap)
    if addresses and not any(port_accepts(port, host, timeout) for host, port in addresses):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # log_level 3: connection-refused noise while a broker starts is expected, not worth a line.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def etcd_endpoint_urls(endpoints: str) -> list[str]:
    """Split ``DUETIME_ETCD_ENDPOINTS`` (comma-separated; scheme optional) into base URLs."""
    urls = []
    for raw in endpoints.split(","):
        endpoint = raw.strip().rstrip("/")
        if not endpoint:
            continue
        urls.append(endpoint if "://" in endpoint else f"http://{endpoint}")
    return urls


def probe_etcd(endpoints: str, timeout: float = 2.0) -> bool:
    """Whether any endpoint reports ``{"health": "true"}`` (a cluster serves from any member)."""
    for base in etcd_endpoint_urls(endpoints):
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=timeout) as response:
                body = json.loads(response.read().decode())
        except (OSError, ValueError, urllib.error.URLError):
            continue
        if str(body.get("health")).lower() == "true":
            return True
    return False


def probe_s3(endpoint: str, timeout: float = 2.0) -> bool:
    """An anonymous ``GET /`` that an S3 server answers with an S3 XML document.

    Without credentials a server answers ``403 AccessDenied`` (or lists buckets, if it allows
    anonymous reads); either is an S3 round trip, and the probe needs no keys, so it works for
    an external endpoint too. Anything else (no answer, an HTML page) is not healthy.
    """
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/", timeout=timeout) as response:
            body = response.read(4096)
    except urllib.error.HTTPError as exc:
        body = exc.read(4096)
    except (OSError, ValueError):
        return False
    return body.lstrip().startswith(b"<?xml") or b"<Error>" in body
