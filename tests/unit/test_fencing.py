"""The fencing token of each execution path: named cases, then the ordering as a property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duetime.fencing import claimed_token, emitted_token


def test_named_cases() -> None:
    assert [claimed_token(n) for n in (1, 2, 3)] == [2, 4, 6]
    assert [emitted_token(n) for n in (1, 2, 3)] == [1, 3, 5]


def test_there_is_no_attempt_zero() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        claimed_token(0)
    with pytest.raises(ValueError, match="at least 1"):
        emitted_token(0)


@given(st.integers(min_value=2, max_value=10**9))
def test_every_path_of_attempt_n_is_above_every_path_of_attempt_n_minus_1(n: int) -> None:
    # A worker's attempt n - 1, then the fast path's attempt n, then a worker's attempt n (the
    # fast path gave the run up): the only orders the database lets these executions happen in.
    assert claimed_token(n - 1) < emitted_token(n) < claimed_token(n)
    assert emitted_token(n - 1) < claimed_token(n - 1)


@given(st.integers(min_value=1, max_value=10**9), st.integers(min_value=1, max_value=10**9))
def test_no_two_paths_or_attempts_share_a_token(a: int, b: int) -> None:
    if a != b:
        assert claimed_token(a) != claimed_token(b)
        assert emitted_token(a) != emitted_token(b)
    assert claimed_token(a) != emitted_token(b)
