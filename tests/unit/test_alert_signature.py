"""X-Duetime-Signature: what a receiver accepts and what it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duetime.alerts import SignatureError, sign, tenant_secret, verify

SECRET = "s3cret-operator-key"
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BODY = b'{"alert_id":1,"kind":"run.dead"}'


def test_a_signed_body_verifies() -> None:
    header = sign(BODY, SECRET, AT)
    assert header.startswith(f"t={int(AT.timestamp())},v1=")
    verify(header, BODY, SECRET, AT + timedelta(seconds=30))


@pytest.mark.parametrize(
    ("body", "secret", "why"),
    [
        (BODY.replace(b"run.dead", b"run.fine"), SECRET, "does not match"),
        (BODY + b" ", SECRET, "does not match"),
        (BODY, "another-secret", "does not match"),
    ],
    ids=["tampered-body", "appended-byte", "wrong-secret"],
)
def test_a_changed_body_or_another_secret_fails(body: bytes, secret: str, why: str) -> None:
    with pytest.raises(SignatureError, match=why):
        verify(sign(BODY, SECRET, AT), body, secret, AT)


@pytest.mark.parametrize("skew", [timedelta(minutes=-6), timedelta(minutes=6)])
def test_a_timestamp_outside_the_tolerance_fails(skew: timedelta) -> None:
    with pytest.raises(SignatureError, match="tolerance"):
        verify(sign(BODY, SECRET, AT), BODY, SECRET, AT + skew)
    verify(sign(BODY, SECRET, AT), BODY, SECRET, AT + skew, tolerance=timedelta(minutes=7))


def test_a_replayed_signature_with_a_fresh_timestamp_fails() -> None:
    mac = sign(BODY, SECRET, AT).split(",v1=")[1]
    fresh = int((AT + timedelta(hours=1)).timestamp())
    with pytest.raises(SignatureError, match="does not match"):
        verify(f"t={fresh},v1={mac}", BODY, SECRET, AT + timedelta(hours=1))


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "t=1",
        "v1=abc",
        "garbage",
        "t=abc,v1=00",
        "t=1,t=2,v1=00",
        "t=-5,v1=00",
        "x" * 2000,
    ],
)
def test_malformed_headers_fail(header: str | None) -> None:
    with pytest.raises(SignatureError):
        verify(header, BODY, SECRET, AT)


def test_any_of_several_v1_values_may_match() -> None:
    """A sender rotating its secret signs with both; receivers with either accept."""
    old = sign(BODY, "old-secret", AT)
    new = sign(BODY, SECRET, AT).split(",", 1)[1]
    verify(f"{old},{new}", BODY, SECRET, AT)
    verify(f"{old},{new}", BODY, "old-secret", AT)


def test_tenant_keys_are_stable_distinct_and_not_the_operator_secret() -> None:
    acme = tenant_secret(SECRET, "acme")
    assert acme == tenant_secret(SECRET, "acme")
    assert acme not in (SECRET, tenant_secret(SECRET, "globex"), tenant_secret("other", "acme"))
    # A tenant's key verifies its own alerts and nobody else's.
    header = sign(BODY, acme, AT)
    verify(header, BODY, acme, AT)
    with pytest.raises(SignatureError):
        verify(header, BODY, tenant_secret(SECRET, "globex"), AT)
    with pytest.raises(SignatureError):
        verify(header, BODY, SECRET, AT)


def test_empty_secrets_are_refused() -> None:
    with pytest.raises(ValueError):
        sign(BODY, "", AT)
    with pytest.raises(ValueError):
        verify("t=1,v1=00", BODY, "", AT)
    with pytest.raises(ValueError):
        tenant_secret("", "acme")


@given(body=st.binary(max_size=512), flip=st.integers(min_value=0))
def test_flipping_any_bit_of_the_body_fails(body: bytes, flip: int) -> None:
    header = sign(body, SECRET, AT)
    verify(header, body, SECRET, AT)
    if body:
        position = flip % (len(body) * 8)
        changed = bytearray(body)
        changed[position // 8] ^= 1 << (position % 8)
        with pytest.raises(SignatureError):
            verify(header, bytes(changed), SECRET, AT)
