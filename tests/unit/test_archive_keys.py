"""Archive object keys: dates, digests and fixed names only; the configured prefix is checked."""

from __future__ import annotations

from datetime import date

import pytest

from duetime.archive.keys import (
    ArchiveKeyError,
    check_prefix,
    data_key,
    day_from_key,
    manifest_key,
)

DIGEST = "ab" * 32
DAY = date(2026, 11, 23)


@pytest.mark.parametrize(
    "prefix",
    [
        "../",
        "../../etc",
        "a/../b",
        "a/./b",
        "/absolute",
        "/",
        "a//b",
        "nul\x00byte",
        "tenant\x00/",
        "Upper",
        "space here",
        "back\\slash",
        ".hidden",
        "-dash",
        "x" * 201,
        "caf\u00e9",
    ],
)
def test_unsafe_prefixes_are_refused(prefix: str) -> None:
    if prefix == "/":
        assert check_prefix(prefix) == ""  # the bucket's root, written as "/"
        return
    with pytest.raises(ArchiveKeyError):
        check_prefix(prefix)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [("", ""), ("duetime", "duetime/"), ("prod/eu-1/", "prod/eu-1/"), ("a.b_c-d", "a.b_c-d/")],
)
def test_safe_prefixes_end_in_one_slash(prefix: str, expected: str) -> None:
    assert check_prefix(prefix) == expected


def test_keys_are_made_of_the_prefix_the_day_and_the_digest() -> None:
    assert data_key("prod/", DAY, DIGEST) == f"prod/runs/day=2026-11-23/{DIGEST}.avro"
    assert manifest_key("", DAY, DIGEST) == f"runs/day=2026-11-23/{DIGEST}.json"


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "a\x00b", "AB" * 32, "ab"])
def test_object_names_must_be_digests(name: str) -> None:
    with pytest.raises(ArchiveKeyError):
        data_key("", DAY, name)


def test_only_keys_of_the_layout_are_read_back() -> None:
    key = data_key("p/", DAY, DIGEST)
    assert day_from_key("p/", key) == (DAY, DIGEST, "avro")
    for foreign in (
        "p/runs/day=2026-11-23/../../x.avro",
        f"p/runs/day=2026-13-45/{DIGEST}.avro",
        f"p/runs/day=2026-11-23/{DIGEST}.avro.bak",
        f"q/runs/day=2026-11-23/{DIGEST}.avro",
        f"p/runs/day=2026-11-23/sub/{DIGEST}.json",
    ):
        assert day_from_key("p/", foreign) is None
