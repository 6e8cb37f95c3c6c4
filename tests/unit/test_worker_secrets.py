"""The worker's secret store: where a referenced secret's value comes from, and what is refused.

Files in a temporary directory and an injected environment and clock; no process environment is
read or changed.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from duetime.credentials import is_credential_header, secret_env_name
from duetime.errors import ConfigError
from duetime.model import SecretRef
from duetime_workers.secret_store import (
    SecretStore,
    SecretUnavailable,
    check_secrets_dir,
    redact,
)
from tests.fakes.clock import ManualClock


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o750)
    return directory


def _store(
    directory: Path | None, environ: dict[str, str] | None = None, clock: ManualClock | None = None
) -> SecretStore:
    return SecretStore(
        directory=directory,
        environ=environ or {},
        worker_id="w-7",
        cache_ttl=timedelta(seconds=5),
        clock=clock or ManualClock(),
    )


def _write(directory: Path, name: str, text: str, mode: int = 0o640) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_env_names_follow_the_documented_mapping() -> None:
    assert secret_env_name("billing-api-token") == "DUETIME_SECRET_BILLING_API_TOKEN"
    assert secret_env_name("crm.key_2") == "DUETIME_SECRET_CRM_KEY_2"


def test_a_file_wins_over_the_environment(secrets_dir: Path) -> None:
    _write(secrets_dir, "billing-api-token", "from-the-file\n")
    env = {"DUETIME_SECRET_BILLING_API_TOKEN": "from-the-env"}
    assert _store(secrets_dir, env).value("billing-api-token") == "from-the-file"


def test_the_environment_serves_what_no_file_holds(secrets_dir: Path) -> None:
    env = {"DUETIME_SECRET_BILLING_API_TOKEN": "from-the-env"}
    assert _store(secrets_dir, env).value("billing-api-token") == "from-the-env"
    assert _store(None, env).value("billing-api-token") == "from-the-env"


def test_one_trailing_line_break_is_dropped(secrets_dir: Path) -> None:
    _write(secrets_dir, "unix", "abc def\n")
    _write(secrets_dir, "dos", "abc def\r\n")
    _write(secrets_dir, "bare", "abc def")
    store = _store(secrets_dir)
    assert {store.value(n) for n in ("unix", "dos", "bare")} == {"abc def"}


def test_headers_are_resolved_with_their_prefix(secrets_dir: Path) -> None:
    _write(secrets_dir, "tok", "s3cr3t")
    headers, used = _store(secrets_dir).resolve(
        [("X-Team", "billing"), ("Authorization", SecretRef("tok", "Bearer "))]
    )
    assert headers == [("X-Team", "billing"), ("Authorization", "Bearer s3cr3t")]
    assert used == ("s3cr3t",)


def test_a_missing_secret_names_itself_the_worker_and_where_it_looked(secrets_dir: Path) -> None:
    with pytest.raises(SecretUnavailable) as info:
        _store(secrets_dir).value("billing-api-token")
    assert str(info.value) == (
        "secret 'billing-api-token' not found on worker w-7 (no file "
        f"{secrets_dir}/billing-api-token, no environment variable "
        "DUETIME_SECRET_BILLING_API_TOKEN)"
    )
    with pytest.raises(SecretUnavailable, match="no DUETIME_SECRETS_DIR, no environment"):
        _store(None).value("billing-api-token")


def test_a_value_is_reused_for_the_ttl_then_read_again(secrets_dir: Path) -> None:
    clock = ManualClock()
    store = _store(secrets_dir, clock=clock)
    path = _write(secrets_dir, "tok", "first")
    assert store.value("tok") == "first"
    path.write_text("rotated")
    clock.now += 4.9
    assert store.value("tok") == "first"
    clock.now += 0.2
    assert store.value("tok") == "rotated"


def test_a_secret_added_after_a_miss_is_found_at_once(secrets_dir: Path) -> None:
    store = _store(secrets_dir)
    with pytest.raises(SecretUnavailable):
        store.value("late")
    _write(secrets_dir, "late", "here now")
    assert store.value("late") == "here now"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "is empty"),
        ("\n", "is empty"),
        ("two\nlines", "contains CR, LF or NUL"),
        ("nul\x00byte", "contains CR, LF or NUL"),
        ("caf\u00e9", "other than printable ASCII"),
        ("x" * 9000, "is larger than 8192 bytes"),
    ],
)
def test_values_that_cannot_be_sent_are_refused_without_quoting_them(
    secrets_dir: Path, content: str, reason: str
) -> None:
    _write(secrets_dir, "bad", content)
    with pytest.raises(SecretUnavailable) as info:
        _store(secrets_dir).value("bad")
    assert reason in str(info.value)
    assert f"secret 'bad' on worker w-7: file {secrets_dir}/bad" in str(info.value)
    if len(content) > 3:
        assert content.strip() not in str(info.value)


def test_an_unusable_environment_value_is_refused_too() -> None:
    with pytest.raises(
        SecretUnavailable, match=r"w-7: environment variable DUETIME_SECRET_T contains CR"
    ):
        _store(None, {"DUETIME_SECRET_T": "line\nbreak"}).value("t")


def test_a_file_that_is_not_utf8_is_refused(secrets_dir: Path) -> None:
    (secrets_dir / "bin").write_bytes(b"\xff\xfe\xfd")
    with pytest.raises(SecretUnavailable, match="is not UTF-8 text"):
        _store(secrets_dir).value("bin")


def test_a_world_writable_file_is_refused(secrets_dir: Path) -> None:
    _write(secrets_dir, "tok", "value", mode=0o666)
    with pytest.raises(SecretUnavailable, match="writable by every user"):
        _store(secrets_dir).value("tok")


def test_a_world_readable_file_is_accepted(secrets_dir: Path) -> None:
    # Kubernetes secret volumes (0644) and Docker secrets (0444) look like this.
    _write(secrets_dir, "tok", "value", mode=0o444)
    assert _store(secrets_dir).value("tok") == "value"


def test_a_file_reached_through_a_symlink_is_read(secrets_dir: Path) -> None:
    # Kubernetes mounts each key as a symlink into a timestamped directory.
    data = secrets_dir / "..2026_01_01"
    data.mkdir()
    _write(data, "tok", "linked")
    (secrets_dir / "tok").symlink_to(data / "tok")
    assert _store(secrets_dir).value("tok") == "linked"


def test_a_fifo_or_a_directory_is_refused_without_blocking(secrets_dir: Path) -> None:
    os.mkfifo(secrets_dir / "fifo")
    (secrets_dir / "sub").mkdir()
    store = _store(secrets_dir)
    with pytest.raises(SecretUnavailable, match="is not a regular file"):
        store.value("fifo")
    with pytest.raises(SecretUnavailable):
        store.value("sub")


def test_an_unreadable_file_does_not_fall_back_to_the_environment(secrets_dir: Path) -> None:
    # The operator meant the file: an error opening it (here a symlink loop) is reported, not
    # papered over with whatever the environment holds.
    (secrets_dir / "tok").symlink_to(secrets_dir / "tok")
    env = {"DUETIME_SECRET_TOK": "other"}
    with pytest.raises(SecretUnavailable, match=r"cannot read file .*symbolic links"):
        _store(secrets_dir, env).value("tok")


def test_an_invalid_name_in_a_hand_made_record_is_refused(secrets_dir: Path) -> None:
    _write(secrets_dir.parent, "outside", "value")
    with pytest.raises(SecretUnavailable, match="is not valid"):
        _store(secrets_dir).value("../outside")


def test_the_secrets_directory_is_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        check_secrets_dir(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        check_secrets_dir(tmp_path / "file")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by every user"):
        SecretStore(directory=shared, environ={}, worker_id="w")


def test_redact_replaces_every_value_used() -> None:
    text = "HTTP 500 Bearer s3cr3t-long echoed s3cr3t-long and short"
    assert redact(text, ("s3cr3t-long", "short")) == (
        "HTTP 500 Bearer [secret] echoed [secret] and [secret]"
    )
    assert redact(text, ()) == text


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("Authorization", True),
        ("X-Api-Key", True),
        ("X-AUTH-TOKEN", True),
        ("Cookie", True),
        ("X-Client-Secret", True),
        ("X-Routing-Key", False),
        ("X-Team", False),
        ("Content-Type", False),
    ],
)
def test_which_header_names_carry_credentials(name: str, credential: bool) -> None:
    assert is_credential_header(name) is credential
