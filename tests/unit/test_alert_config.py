"""Alert settings from the environment."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

import pytest

from duetime.bus.topics import TopicCatalog
from duetime.errors import ConfigError
from duetime_reaper.alert_config import ENVIRONMENT, AlertConfig
from duetime_workers.config import GROUP_ID


def test_defaults() -> None:
    config = AlertConfig.from_env({})
    assert config == AlertConfig()
    assert (config.webhook, config.secret, config.max_attempts) == (None, None, 10)
    assert config.outbox_backlog == 100 and config.ready_lag == 10_000
    assert config.lateness_p99 == timedelta(seconds=5)


def test_every_variable_names_a_setting() -> None:
    names = {f.name for f in fields(AlertConfig)}
    assert {attribute for attribute, _ in ENVIRONMENT.values()} <= names
    assert all(name.startswith("DUETIME_") for name in ENVIRONMENT)


def test_values_from_the_environment() -> None:
    config = AlertConfig.from_env(
        {
            "DUETIME_ALERT_WEBHOOK": "https://hooks.example/ops",
            "DUETIME_ALERT_SECRET": "k",
            "DUETIME_ALERT_TIMEOUT": "2.5",
            "DUETIME_ALERT_MAX_ATTEMPTS": "3",
            "DUETIME_ALERT_RETENTION_DAYS": "7",
            "DUETIME_ALERT_HOLD": "0",
            "DUETIME_ALERT_OUTBOX_BACKLOG": "off",
            "DUETIME_ALERT_READY_LAG": "500",
            "DUETIME_ALERT_LATENESS_P99": "OFF",
            "DUETIME_ALLOW_PRIVATE_TARGETS": "1",
        }
    )
    assert config.webhook == "https://hooks.example/ops" and config.secret == "k"
    assert config.timeout == timedelta(seconds=2.5) and config.max_attempts == 3
    assert config.retention == timedelta(days=7) and config.hold == timedelta(0)
    assert config.outbox_backlog is None and config.ready_lag == 500
    assert config.lateness_p99 is None and config.allow_private


def test_secrets_stay_out_of_the_repr() -> None:
    config = AlertConfig(webhook="https://hooks.example/T000/B000/XXXX", secret="hunter2")
    assert "hunter2" not in repr(config) and "XXXX" not in repr(config)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DUETIME_ALERT_TIMEOUT", "soon"),
        ("DUETIME_ALERT_TIMEOUT", "0"),
        ("DUETIME_ALERT_TIMEOUT", "-1"),
        ("DUETIME_ALERT_MAX_ATTEMPTS", "0"),
        ("DUETIME_ALERT_MAX_ATTEMPTS", "2.5"),
        ("DUETIME_ALERT_BATCH", "100000"),
        ("DUETIME_ALERT_BACKOFF_MAX", "0.1"),
        ("DUETIME_ALERT_READY_LAG", "-3"),
        ("DUETIME_ALLOW_PRIVATE_TARGETS", "maybe"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        AlertConfig.from_env({name: value})


def test_the_lag_check_watches_the_workers_group() -> None:
    """The reaper cannot import the worker; the core's catalog must name the worker's group."""
    assert TopicCatalog("p.").workers_group == f"p.{GROUP_ID}"
