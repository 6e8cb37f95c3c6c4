"""Settings from the environment: the Kafka client id every client of a process sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from duetime.bus.kafka import consumer_config, producer_config
from duetime.config import load_settings, read_env_file, write_env_file
from duetime.errors import ConfigError


def _env(**extra: str) -> dict[str, str]:
    return {"DUETIME_KAFKA_BOOTSTRAP": "127.0.0.1:9092", **extra}


def test_every_kafka_client_of_a_process_sends_its_client_id(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, _env(DUETIME_KAFKA_CLIENT_ID="workers-eu.1"))
    assert producer_config(settings)["client.id"] == "workers-eu.1"
    assert consumer_config(settings, "g")["client.id"] == "workers-eu.1"


def test_the_client_id_defaults_to_duetime(tmp_path: Path) -> None:
    assert load_settings(tmp_path, _env()).kafka_client_id == "duetime"


@pytest.mark.parametrize("bad", ["", "has space", "x" * 250, "tenant/a", "é"])
def test_a_client_id_kafka_would_refuse_is_a_clear_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="DUETIME_KAFKA_CLIENT_ID"):
        load_settings(tmp_path, _env(DUETIME_KAFKA_CLIENT_ID=bad))


def test_the_env_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "stack.env"
    path.write_text("OLD=1\n")
    path.chmod(0o644)
    write_env_file(path, {"DUETIME_S3_SECRET_ACCESS_KEY": "s3cr3t"})
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_env_file(path) == {"DUETIME_S3_SECRET_ACCESS_KEY": "s3cr3t"}
