"""The embedded local stack (PostgreSQL, a Kafka-protocol broker, etcd, S3) and its components.

Public API::

    stack = EmbeddedStack(Path(".duetime"))
    urls = stack.up()          # idempotent; StackUrls(database_url, kafka_bootstrap, ...)
    stack.status()             # [ComponentStatus(name, url, pid, healthy, external), ...]
    stack.kafka.kill(); stack.kafka.start()   # crash and restart on the same port
    stack.down()               # idempotent

See infra/README.md for how it works and for running against external servers.
"""

from __future__ import annotations

from duetime_infra.component import Component
from duetime_infra.etcd import EtcdServer
from duetime_infra.kafka import KafkaBroker
from duetime_infra.ports import find_free_port
from duetime_infra.postgres import PostgresServer
from duetime_infra.seaweed import SeaweedS3
from duetime_infra.stack import COMPONENTS, ENV_KEYS, ComponentStatus, EmbeddedStack, StackUrls

__all__ = [
    "COMPONENTS",
    "ENV_KEYS",
    "Component",
    "ComponentStatus",
    "EmbeddedStack",
    "EtcdServer",
    "KafkaBroker",
    "PostgresServer",
    "SeaweedS3",
    "StackUrls",
    "find_free_port",
]
