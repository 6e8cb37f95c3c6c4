"""The reaper's settings from the environment."""

from __future__ import annotations

from datetime import timedelta

import pytest

from duetime.errors import ConfigError
from duetime_reaper.config import ReaperConfig


def test_the_scan_interval_defaults_to_30_seconds_and_comes_from_the_environment() -> None:
    assert ReaperConfig.from_env({}).scan_interval == timedelta(seconds=30)
    config = ReaperConfig.from_env({"DUETIME_REAPER_SCAN_INTERVAL": "2.5"})
    assert config.scan_interval == timedelta(seconds=2.5)


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_a_scan_interval_that_cannot_work_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="DUETIME_REAPER_SCAN_INTERVAL"):
        ReaperConfig.from_env({"DUETIME_REAPER_SCAN_INTERVAL": raw})


@pytest.mark.parametrize(
    "field",
    [
        {"batch_size": 0},
        {"recheck_interval": timedelta(0)},
        {"expiry_grace": timedelta(seconds=-1)},
        {"ended_memory": 0},
    ],
)
def test_settings_are_checked(field: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ReaperConfig(**field)  # type: ignore[arg-type]
