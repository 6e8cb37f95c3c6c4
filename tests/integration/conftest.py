"""Fixtures shared by the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from duetime.bus.kafka import create_topics, producer_config
from duetime.config import Settings
from duetime.store import Store


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The CLI pointed at this test's database, and at a data dir without a running stack."""
    monkeypatch.setenv("DUETIME_DATABASE_URL", database_url)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path / "no-stack"))
    return database_url


@pytest.fixture
def env(database_url: str, stack: Any) -> Iterator[tuple[Settings, Store, Producer]]:
    """Settings with a topic prefix of this test's own (its topics created), a store on this
    test's database and a producer. A module may define its own ``env`` instead."""
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"p{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    store = Store(database_url, pool_size=2)
    producer = Producer(producer_config(settings))
    yield settings, store, producer
    store.close()
