"""The jobs-topic signature (duetime.jobs_guard) and the guard's owner rule, without I/O."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from duetime.errors import InvalidInput
from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.jobs_guard import check_signature, signature_headers, tenant_key
from duetime.model import JobDefinition
from duetime.store.store import StoredJob
from duetime_planner.guard import JobsTopicGuard

SECRET = "s3cret"


@dataclass
class _Message:
    key_: bytes
    value_: bytes
    headers_: list[tuple[str, bytes | None]]

    def key(self) -> bytes:
        return self.key_

    def value(self) -> bytes:
        return self.value_

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self.headers_


def _signed(tenant: str, key: bytes = b"job", value: bytes = b"v", signer: str = "") -> _Message:
    headers = signature_headers(tenant_key(SECRET, signer or tenant), tenant, key, value)
    return _Message(key, value, list(headers))


def _job(job_id: str, tenant: str) -> JobDefinition:
    return parse_job(
        {
            "id": job_id,
            "tenant": tenant,
            "schedule": {"cron": "0 3 * * *"},
            "target": {"http": {"url": "https://example.com/hook"}},
        }
    )


def test_tenant_keys_differ_by_tenant_and_secret() -> None:
    assert tenant_key(SECRET, "acme") != tenant_key(SECRET, "globex")
    assert tenant_key(SECRET, "acme") != tenant_key("other", "acme")
    assert tenant_key(SECRET, "acme") == tenant_key(SECRET, "acme")
    with pytest.raises(ValueError):
        tenant_key("", "acme")


def test_signature_covers_key_value_and_tenant() -> None:
    msg = _signed("acme")
    assert check_signature(SECRET, msg.headers(), b"job", b"v") == ("acme", "")
    for key, value in ((b"other", b"v"), (b"job", b"w"), (b"job\n", b"v")):
        tenant, reason = check_signature(SECRET, msg.headers(), key, value)
        assert tenant is None and "does not match" in reason
    assert check_signature("wrong", msg.headers(), b"job", b"v")[0] is None
    claimed = [("duetime-tenant", b"globex"), msg.headers()[1]]
    assert check_signature(SECRET, claimed, b"job", b"v")[0] is None
    for headers in ([], [msg.headers()[0]], [*msg.headers(), msg.headers()[1]]):
        tenant, reason = check_signature(SECRET, headers, b"job", b"v")
        assert tenant is None and "unsigned" in reason
    broken = [msg.headers()[0], ("duetime-signature", b"sha1=00")]
    assert check_signature(SECRET, broken, b"job", b"v")[0] is None


def test_admit_needs_the_definitions_own_tenant() -> None:
    guard = JobsTopicGuard(SECRET)
    guard.admit(_signed("acme", b"j"), _job("j", "acme"))
    guard.admit(_signed("acme", b"j"), JobTombstone("j", 3))
    with pytest.raises(InvalidInput) as refused:
        guard.admit(_signed("globex", b"j"), _job("j", "acme"))
    assert refused.value.field == "tenant"
    with pytest.raises(InvalidInput):
        guard.admit(_signed("acme", b"j", signer="globex"), _job("j", "acme"))


def test_owner_rule_follows_the_batch_order() -> None:
    guard = JobsTopicGuard(SECRET)
    stored = {"old": StoredJob(1, "acme")}
    items = [
        (_signed("globex"), _job("old", "globex")),  # 0: acme's job
        (_signed("acme"), _job("old", "acme")),  # 1: its own
        (_signed("globex"), _job("new", "globex")),  # 2: a new job: globex's from now on
        (_signed("acme"), _job("new", "acme")),  # 3: taken by globex just before
        (_signed("globex"), JobTombstone("old", 5)),  # 4: acme's job
        (_signed("acme"), JobTombstone("old", 5)),  # 5: its own
        (_signed("globex"), _job("old", "globex")),  # 6: deleted in this batch, still acme's
    ]
    assert sorted(guard.owner_refusals(items, stored)) == [0, 3, 4, 6]


def test_topic_key_command_prints_the_tenants_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from duetime.cli.main import main

    monkeypatch.delenv("DUETIME_JOBS_TOPIC_SECRET", raising=False)
    monkeypatch.setenv("DUETIME_DATA_DIR", str(tmp_path))  # no duetime up secret there
    assert main(["tokens", "topic-key", "--tenant", "acme"]) == 1
    assert "DUETIME_JOBS_TOPIC_SECRET is not set" in capsys.readouterr().err
    monkeypatch.setenv("DUETIME_JOBS_TOPIC_SECRET", SECRET)
    assert main(["tokens", "topic-key", "--tenant", "acme"]) == 0
    assert capsys.readouterr().out == tenant_key(SECRET, "acme") + "\n"
    assert main(["tokens", "topic-key", "--tenant", "Bad Name"]) == 2
