"""Test session set-up: the embedded stack fixtures (real PostgreSQL, broker and etcd)."""

pytest_plugins = [
    "tests.fixtures.stack",
    "tests.fixtures.db",
    "tests.fixtures.target",
    "tests.fixtures.s3",
]
