"""The embedded PostgreSQL's workload settings and the operator's overrides (pure logic)."""

from __future__ import annotations

import pytest

from duetime.errors import StackError
from duetime_infra.postgres import parse_settings, workload_settings

GIB = 2**30


@pytest.mark.parametrize(
    ("memory", "buffers"),
    [(512 * 2**20, "128MB"), (4 * GIB, "512MB"), (8 * GIB, "1024MB"), (64 * GIB, "2048MB")],
)
def test_shared_buffers_are_an_eighth_of_memory_between_128mb_and_2gb(
    memory: int, buffers: str
) -> None:
    assert workload_settings(memory)["shared_buffers"] == buffers


def test_checkpoints_are_spaced_for_a_steady_write_load() -> None:
    settings = workload_settings(8 * GIB)
    assert settings["max_wal_size"] == "4GB"
    assert settings["checkpoint_timeout"] == "15min"


def test_overrides_are_name_value_pairs_separated_by_commas() -> None:
    assert parse_settings(" shared_buffers=4GB, max_wal_size = 16GB ,") == {
        "shared_buffers": "4GB",
        "max_wal_size": "16GB",
    }
    assert parse_settings("") == {}


@pytest.mark.parametrize("text", ["shared_buffers", "=4GB", "shared_buffers=", "a=1,b"])
def test_an_override_that_is_not_name_value_is_refused_naming_it(text: str) -> None:
    with pytest.raises(StackError, match="DUETIME_POSTGRES_SETTINGS") as error:
        parse_settings(text)
    assert "not name=value" in str(error.value)
