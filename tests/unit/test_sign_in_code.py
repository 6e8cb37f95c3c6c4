"""The one-time sign-in code (pure): its shape and hash, and its redaction from access log paths."""

from __future__ import annotations

import hashlib

import pytest

from duetime.api_tokens import issue_sign_in_code, sign_in_code_sha256
from duetime_api.access_log import REDACTED_PATH, redact_path


def test_a_code_is_43_url_safe_characters_and_its_hash_is_sha256() -> None:
    code, sha256 = issue_sign_in_code()
    assert len(code) == 43 and sha256 == hashlib.sha256(code.encode()).digest()
    assert sign_in_code_sha256(code) == sha256
    assert issue_sign_in_code()[0] != code


@pytest.mark.parametrize(
    "text", ["", "x", "a" * 42, "a" * 44, "a" * 43 + "\n", "ü" * 43, "a" * 42 + "/", "a" * 42 + "="]
)
def test_a_malformed_code_has_no_hash(text: str) -> None:
    assert sign_in_code_sha256(text) is None


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/ui/sign-in/abc_-XYZ", REDACTED_PATH),
        ("/ui/sign-in/abc?next=/ui/", REDACTED_PATH),
        (
            '1.2.3.4 - "GET /ui/sign-in/abc HTTP/1.1" 303',
            f'1.2.3.4 - "GET {REDACTED_PATH} HTTP/1.1" 303',
        ),
        ("/ui/sign-in/", REDACTED_PATH),
        ("/ui/login", "/ui/login"),
        ("/v1/jobs?q=sign-in", "/v1/jobs?q=sign-in"),
    ],
)
def test_access_log_paths_lose_the_code(path: str, logged: str) -> None:
    assert redact_path(path) == logged
