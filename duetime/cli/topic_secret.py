"""The jobs-topic guard's secret of a ``duetime up`` stack: ``<data dir>/jobs-topic.secret``.

Without ``DUETIME_JOBS_TOPIC_SECRET`` the planner ingests any record on the jobs topic, for any
tenant (``duetime.jobs_guard``). ``duetime up`` therefore turns the guard on: it makes a random
secret once per data dir (mode 0600, like ``api.json``), keeps it across restarts (tenant keys
handed out stay valid) and gives it to the planners. A secret set in the environment wins: an
operator's own secret is never replaced. ``duetime tokens topic-key`` reads the same file when
the environment has none, so a stack's tenant keys can be printed without copying the secret.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path

from duetime.jobs_guard import SECRET_ENV

from .private_file import write_private

__all__ = ["TOPIC_SECRET_FILE", "ensure_topic_secret", "topic_secret"]

TOPIC_SECRET_FILE = "jobs-topic.secret"


def _read(data_dir: Path) -> str:
    try:
        return (data_dir / TOPIC_SECRET_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


def topic_secret(env: Mapping[str, str], data_dir: Path) -> str:
    """The guard secret: the environment's, else the data dir's; "" when there is none."""
    return env.get(SECRET_ENV, "").strip() or _read(data_dir)


def ensure_topic_secret(env: Mapping[str, str], data_dir: Path) -> str:
    """The guard secret ``duetime up`` gives its planners, made (and kept) if there is none."""
    secret = topic_secret(env, data_dir)
    if not secret:
        secret = secrets.token_hex(32)
        write_private(data_dir / TOPIC_SECRET_FILE, secret + "\n")
    return secret
