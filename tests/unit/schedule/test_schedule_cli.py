"""`duetime schedule preview` and `duetime schedule lint`."""

from __future__ import annotations

import json

import pytest

from duetime.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["schedule", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_preview_json_shows_dst_notes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "preview",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2025-03-29T12:00:00Z",
        "--count",
        "2",
        "--json",
    )
    assert code == 0
    rows = json.loads(out)
    assert rows == [
        {
            "scheduled_for": "2025-03-30T01:00:00Z",
            "local": "2025-03-30T03:00:00+02:00",
            "note": "02:30 does not exist on 2025-03-30 (DST gap 02:00-03:00); "
            "runs once at 03:00 (+02:00)",
        },
        {
            "scheduled_for": "2025-03-31T00:30:00Z",
            "local": "2025-03-31T02:30:00+02:00",
            "note": None,
        },
    ]


def test_preview_text_with_overlap_twice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "preview",
        "--cron",
        "0 1 * * *",
        "--tz",
        "America/New_York",
        "--dst-overlap",
        "twice",
        "--after",
        "2024-11-02T12:00:00Z",
        "--count",
        "3",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("cron '0 1 * * *' in America/New_York")
    assert "2024-11-03T05:00:00Z" in lines[1] and "this is the first (-04:00)" in lines[1]
    assert "2024-11-03T06:00:00Z" in lines[2] and "this is the second (-05:00)" in lines[2]
    assert lines[3].split()[0] == "2024-11-04T06:00:00Z"


def test_preview_interval_and_at(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "preview",
        "--interval",
        "PT5M",
        "--start",
        "2025-01-01T00:00:30Z",
        "--after",
        "2025-01-01T01:00:00",
        "--count",
        "2",
        "--json",
    )
    assert code == 0
    assert [row["scheduled_for"] for row in json.loads(out)] == [
        "2025-01-01T01:00:30Z",
        "2025-01-01T01:05:30Z",
    ]
    code, out, _ = run(
        capsys, "preview", "--at", "2025-01-01T00:00:00Z", "--after", "2026-01-01T00:00:00Z"
    )
    assert code == 0 and "never fires" in out


def test_preview_defaults_to_now(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "preview", "--cron", "@hourly", "--tz", "UTC", "--json")
    assert code == 0 and len(json.loads(out)) == 10


def test_lint_lists_dst_dates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "lint",
        "--cron",
        "*/30 1-2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2024-01-01T00:00:00Z",
        "--json",
    )
    assert code == 0
    effects = json.loads(out)
    assert [(e["date"], e["effect"]) for e in effects] == [
        ("2024-03-10", "shifted"),
        ("2024-11-03", "once"),
    ]
    assert effects[0]["runs"] == ["2024-03-10T07:00:00Z"]
    assert effects[0]["walls"] == ["2024-03-10T02:00:00", "2024-03-10T02:30:00"]


def test_lint_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "lint",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--dst-gap",
        "skip",
        "--after",
        "2025-01-01T00:00:00Z",
    )
    assert code == 0
    assert "2025-03-30  skipped" in out
    code, out, _ = run(
        capsys,
        "lint",
        "--cron",
        "0 0 * * *",
        "--tz",
        "Asia/Kolkata",
        "--after",
        "2025-01-01T00:00:00Z",
    )
    assert code == 0 and "DST changes nothing" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["preview", "--cron", "60 * * * *", "--tz", "UTC"], "schedule: minute field '60'"),
        (["preview", "--cron", "0 0 31 2 *", "--tz", "UTC"], "never fires"),
        (["preview", "--cron", "0 * * * *", "--tz", "Europe/berlin"], "time_zone: unknown zone"),
        (["preview", "--cron", "0 * * * *", "--tz", "posixrules"], "time_zone:"),
        (["preview", "--cron", "0 * * * *"], "time_zone: --tz is required with --cron"),
        (["preview", "--cron", "@reboot", "--tz", "UTC"], "@reboot"),
        (["preview", "--interval", "P1M"], "no fixed length"),
        (["preview", "--cron", "0 * * * *", "--tz", "UTC", "--count", "0"], "count:"),
        (["preview", "--cron", "0 * * * *", "--tz", "UTC", "--after", "soon"], "after:"),
        (["preview", "--at", "2025-01-01T00:00:00"], "has no offset"),
        (["preview", "--cron", "0 * * * *", "--tz", "UTC", "--dst-gap", "later"], "--dst-gap"),
        (["preview", "--cron", "0 * * * *", "--interval", "PT5M"], "not allowed with"),
        (["lint", "--tz", "UTC"], "--cron"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        code, out, err = run(capsys, *argv)
    except SystemExit as exit_:  # argparse errors leave through SystemExit
        code = int(exit_.code or 0)
        captured = capsys.readouterr()
        out, err = captured.out, captured.err
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err
