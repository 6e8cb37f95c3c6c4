"""SQLAlchemy engines on psycopg 3, and the translation of driver errors at this edge."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

__all__ = ["make_engine", "sqlalchemy_url"]


def sqlalchemy_url(database_url: str) -> str:
    """Accept ``postgresql://`` / ``postgres://`` URLs and pin the psycopg 3 driver."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def make_engine(
    database_url: str, *, pool_size: int = 5, application_name: str = "duetime"
) -> Engine:
    return create_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # Below the services' client-side call deadlines (10 s): waiting for a connection is
        # part of a call, and an exhausted pool must fail the call, not outlive its deadline.
        pool_timeout=5,
        connect_args={
            "application_name": application_name,
            "connect_timeout": 10,
            # Server-side guards: a partitioned client must not hold locks forever.
            "options": "-c idle_in_transaction_session_timeout=60000 -c statement_timeout=60000",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        },
    )
