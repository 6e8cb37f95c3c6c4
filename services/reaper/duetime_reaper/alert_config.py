"""Alert settings: where alerts go, how they are signed and retried, and each condition's threshold.

Every setting has an environment variable (the table in docs/runs.md, "Alerts"); a threshold set
to ``off`` turns its condition off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from duetime.errors import ConfigError
from duetime.schedule import RetryPolicy

__all__ = ["ENVIRONMENT", "AlertConfig"]


@dataclass(frozen=True)
class AlertConfig:
    """Settings of the alert sender and of the condition checks.

    Attributes:
        webhook: The operator's webhook: every alert without a tenant webhook goes there.
        secret: Signs every delivery (``X-Duetime-Signature``); tenant webhooks get a key
            derived from it. Unset: deliveries go out unsigned (a warning says so at start).
        timeout: The whole of one delivery attempt (connect, send, answer).
        max_attempts: Delivery attempts per alert before it is ``failed``.
        backoff_initial / backoff_max: The delay after the first failed attempt, doubling per
            attempt up to the cap (with up to 20 % jitter fixed by the alert id).
        batch_size: Alerts claimed per sending round, sent concurrently.
        poll_interval: How long the sender waits when it found nothing to send.
        allow_private: Tenant webhooks may reach internal addresses (the workers' switch,
            ``DUETIME_ALLOW_PRIVATE_TARGETS``). The operator's webhook is always allowed to.
        retention: Finished alerts are deleted this long after they were raised.
        check_interval: How often the conditions are measured.
        hold: How long a condition must be over (under) its threshold to fire (resolve).
        outbox_backlog / outbox_age: Fire when at least ``outbox_backlog`` scheduled runs are
            still unpublished ``outbox_age`` after they were due.
        ready_lag: Fire when the workers' group is this many records behind on ``runs.ready``.
        lateness_p99 / lateness_window: Fire when the p99 release lateness of the first attempts
            due in the last ``lateness_window`` exceeds ``lateness_p99``.
    """

    webhook: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    timeout: timedelta = timedelta(seconds=5)
    max_attempts: int = 10
    backoff_initial: timedelta = timedelta(seconds=1)
    backoff_max: timedelta = timedelta(minutes=5)
    batch_size: int = 50
    poll_interval: timedelta = timedelta(seconds=1)
    allow_private: bool = False
    retention: timedelta = timedelta(days=30)
    check_interval: timedelta = timedelta(seconds=15)
    hold: timedelta = timedelta(seconds=30)
    outbox_backlog: int | None = 100
    outbox_age: timedelta = timedelta(seconds=60)
    ready_lag: int | None = 10_000
    lateness_p99: timedelta | None = timedelta(seconds=5)
    lateness_window: timedelta = timedelta(seconds=60)
    # Runs the lateness check reads at most (the latest due), so a huge minute stays cheap.
    lateness_sample: int = 100_000

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 100:
            raise ConfigError("DUETIME_ALERT_MAX_ATTEMPTS must be between 1 and 100")
        if not 1 <= self.batch_size <= 1000:
            raise ConfigError("DUETIME_ALERT_BATCH must be between 1 and 1000")
        for name in ("TIMEOUT", "BACKOFF_INITIAL", "CHECK_INTERVAL"):
            if getattr(self, ENVIRONMENT[f"DUETIME_ALERT_{name}"][0]) <= timedelta(0):
                raise ConfigError(f"DUETIME_ALERT_{name} must be positive")
        if self.poll_interval <= timedelta(0):
            raise ConfigError("the alert sender's poll interval must be positive")
        if self.backoff_max < self.backoff_initial:
            raise ConfigError("DUETIME_ALERT_BACKOFF_MAX must be at least the initial backoff")
        if self.hold < timedelta(0):
            raise ConfigError("DUETIME_ALERT_HOLD must not be negative")

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            initial_interval=self.backoff_initial,
            multiplier=2.0,
            max_interval=self.backoff_max,
            jitter=0.2,
        )

    @property
    def claim_lease(self) -> timedelta:
        """How long a claimed alert stays hidden from other senders: a round's sends run
        concurrently and each ends by ``timeout``, so this covers a slow round with room to
        record it; a sender gone for longer has its alerts sent again."""
        return 2 * self.timeout + timedelta(seconds=10)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AlertConfig:
        env = os.environ if environ is None else environ
        changes: dict[str, Any] = {}
        for name, (attribute, parse) in ENVIRONMENT.items():
            raw = env.get(name, "").strip()
            if raw:
                changes[attribute] = parse(name, raw)
        return replace(cls(), **changes)


def _text(_name: str, raw: str) -> str:
    return raw


def _count(name: str, raw: str) -> int:
    if not raw.isdigit():
        raise ConfigError(f"{name} must be a whole number, not {raw!r}")
    return int(raw)


def _seconds(name: str, raw: str) -> timedelta:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not 0 <= value < 10**9:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}")
    return timedelta(seconds=value)


def _days(name: str, raw: str) -> timedelta:
    return timedelta(days=_count(name, raw))


def _flag(name: str, raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1 or 0, not {raw!r}")


def _or_off(parse: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    def parse_threshold(name: str, raw: str) -> Any:
        return None if raw.lower() == "off" else parse(name, raw)

    return parse_threshold


# Environment variable -> (AlertConfig attribute, parser). docs/runs.md lists them with defaults.
ENVIRONMENT: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "DUETIME_ALERT_WEBHOOK": ("webhook", _text),
    "DUETIME_ALERT_SECRET": ("secret", _text),
    "DUETIME_ALERT_TIMEOUT": ("timeout", _seconds),
    "DUETIME_ALERT_MAX_ATTEMPTS": ("max_attempts", _count),
    "DUETIME_ALERT_BACKOFF_INITIAL": ("backoff_initial", _seconds),
    "DUETIME_ALERT_BACKOFF_MAX": ("backoff_max", _seconds),
    "DUETIME_ALERT_BATCH": ("batch_size", _count),
    "DUETIME_ALERT_RETENTION_DAYS": ("retention", _days),
    "DUETIME_ALERT_CHECK_INTERVAL": ("check_interval", _seconds),
    "DUETIME_ALERT_HOLD": ("hold", _seconds),
    "DUETIME_ALERT_OUTBOX_BACKLOG": ("outbox_backlog", _or_off(_count)),
    "DUETIME_ALERT_OUTBOX_AGE": ("outbox_age", _seconds),
    "DUETIME_ALERT_READY_LAG": ("ready_lag", _or_off(_count)),
    "DUETIME_ALERT_LATENESS_P99": ("lateness_p99", _or_off(_seconds)),
    "DUETIME_ALERT_LATENESS_WINDOW": ("lateness_window", _seconds),
    "DUETIME_ALLOW_PRIVATE_TARGETS": ("allow_private", _flag),
}
