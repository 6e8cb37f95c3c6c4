"""``duetime targets set|unset|list`` against a real database."""

from __future__ import annotations

import contextlib
import json

import pytest

from duetime.cli.main import main

pytestmark = pytest.mark.integration


def test_set_change_list_and_unset(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets", "set", "api.example.com", "--rate", "50", "--burst", "10"]) == 0
    assert "rate=50 burst=10 max_in_flight=-" in capsys.readouterr().out
    # Changing one limit keeps the others.
    assert main(["targets", "set", "api.example.com", "--max-in-flight", "4"]) == 0
    assert main(["targets", "set", "*", "--rate", "1000"]) == 0
    capsys.readouterr()
    assert main(["targets", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == [
        {
            "target": "*",
            "rate_per_s": 1000.0,
            "burst": None,
            "max_in_flight": None,
            "in_flight": 0,
            "throttled": 0,
        },
        {  # the drain of missed runs, there from the start
            "target": "@catch-up",
            "rate_per_s": 1000.0,
            "burst": None,
            "max_in_flight": None,
            "in_flight": 0,
            "throttled": 0,
        },
        {
            "target": "api.example.com",
            "rate_per_s": 50.0,
            "burst": 10,
            "max_in_flight": 4,
            "in_flight": 0,
            "throttled": 0,
        },
    ]
    assert main(["targets", "list"]) == 0
    assert "api.example.com" in capsys.readouterr().out
    assert main(["targets", "unset", "api.example.com"]) == 0
    assert "now follows the default" in capsys.readouterr().out
    assert main(["targets", "unset", "api.example.com"]) == 3  # not found


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["targets", "set", "api.example.com"], "give at least one of"),
        (["targets", "set", "api.example.com", "--rate", "0"], "--rate: must be a number above 0"),
        (["targets", "set", "api.example.com", "--rate", "nan"], "--rate"),
        (["targets", "set", "api.example.com", "--burst", "0"], "--burst"),
        (["targets", "set", "bad name", "--rate", "5"], "name: use 1-200 characters"),
        (["targets", "set", "api.example.com", "--max-in-flight", "x"], "invalid int value"),
    ],
)
def test_bad_input_is_a_clear_error(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) if "invalid int" in message else contextlib.nullcontext():
        code = main(argv)
        assert code == 2
    assert message in capsys.readouterr().err
