"""Worker settings from the environment and the command line."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from duetime.errors import ConfigError
from duetime_workers.config import WorkerConfig
from duetime_workers.processes import child_argv, process_count
from duetime_workers.service import build_config, parser


def test_defaults() -> None:
    config = WorkerConfig.from_env({})
    assert config.concurrency == 256
    assert config.allow_private_targets is False
    assert config.group_id == "workers"  # the worker puts the topic prefix in front
    assert config.user_agent.startswith("duetime-worker/")
    assert "-" in config.worker_id  # hostname-pid


def test_environment() -> None:
    config = WorkerConfig.from_env(
        {
            "DUETIME_WORKER_ID": "w-7",
            "DUETIME_WORKER_CONCURRENCY": "4",
            "DUETIME_ALLOW_PRIVATE_TARGETS": "1",
            "DUETIME_WORKER_SHUTDOWN_GRACE": "2.5",
        }
    )
    assert (config.worker_id, config.concurrency, config.allow_private_targets) == ("w-7", 4, True)
    assert config.shutdown_grace == timedelta(seconds=2.5)


@pytest.mark.parametrize(
    "env",
    [
        {"DUETIME_WORKER_CONCURRENCY": "0"},
        {"DUETIME_WORKER_CONCURRENCY": "many"},
        {"DUETIME_ALLOW_PRIVATE_TARGETS": "perhaps"},
        {"DUETIME_WORKER_SHUTDOWN_GRACE": "-1"},
    ],
)
def test_bad_environment_is_a_config_error(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        WorkerConfig.from_env(env)


def test_command_line_overrides_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUETIME_WORKER_CONCURRENCY", "4")
    monkeypatch.delenv("DUETIME_ALLOW_PRIVATE_TARGETS", raising=False)
    args = parser().parse_args(
        ["--worker-id", "cli", "--concurrency", "2", "--allow-private-targets"]
    )
    config = build_config(args)
    assert (config.worker_id, config.concurrency, config.allow_private_targets) == ("cli", 2, True)


def test_secrets_directory_from_the_environment_or_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert WorkerConfig.from_env({}).secrets_dir is None
    assert WorkerConfig.from_env({"DUETIME_SECRETS_DIR": str(tmp_path)}).secrets_dir == tmp_path
    monkeypatch.setenv("DUETIME_SECRETS_DIR", "/nowhere")
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    assert build_config(parser().parse_args(["--secrets-dir", str(chosen)])).secrets_dir == chosen


def test_an_unusable_secrets_directory_stops_the_worker_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUETIME_SECRETS_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"secrets directory .*missing"):
        build_config(parser().parse_args([]))


def test_main_is_the_registered_entry_point() -> None:
    from importlib.metadata import entry_points

    (worker,) = [e for e in entry_points(group="duetime.services") if e.name == "worker"]
    assert worker.value == "duetime_workers.service:main"
    from duetime_workers import main

    assert worker.load() is main


def test_public_api() -> None:
    import duetime_workers

    assert sorted(duetime_workers.__all__) == ["WorkerConfig", "WorkerService", "main"]


def test_process_count_defaults_to_the_cores_and_is_validated() -> None:
    assert process_count(None, {}) == (os.cpu_count() or 1)
    assert process_count(None, {"DUETIME_WORKER_PROCESSES": "3"}) == 3
    assert process_count(2, {"DUETIME_WORKER_PROCESSES": "3"}) == 2  # the option wins
    assert process_count(4, {"DUETIME_WORKER_CHILD": "1"}) == 1  # a worker process never forks
    for bad in ({"DUETIME_WORKER_PROCESSES": "two"}, {"DUETIME_WORKER_PROCESSES": "0"}):
        with pytest.raises(ConfigError):
            process_count(None, bad)
    argv = ["--processes", "2", "--concurrency", "8", "--worker-id=w", "--log-level", "DEBUG"]
    assert child_argv(argv) == ["--concurrency", "8", "--log-level", "DEBUG"]
