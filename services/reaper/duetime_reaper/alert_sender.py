"""The alert sender: claim due alerts, POST them concurrently, record what each attempt came to.

A round is three steps and only the middle one touches the network: claim a batch in one short
transaction (which counts the attempt and hides the alerts from other senders for the claim's
lease), send every alert of the batch at once over one pooled HTTP client, each under its own
deadline, then record the outcomes in one short transaction. No transaction is open while a
webhook is being called, so a hung receiver costs one deadline per round and holds no lock.

Routing: an alert of a tenant with a webhook (``tenants.alert_webhook``) goes there, signed with
the tenant's derived key; every other alert goes to the operator's webhook, signed with the
operator's secret (``duetime.alerts.signature``). Tenant webhooks pass the workers' SSRF guard
(``duetime.egress``): an internal address is refused unless ``DUETIME_ALLOW_PRIVATE_TARGETS``
is set. The operator's webhook is operator configuration and may be internal. Redirects are
never followed and environment proxies are ignored. Webhook URLs and secrets are never logged
(a chat webhook URL is itself a credential).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from yarl import URL

from duetime.alerts import (
    SIGNATURE_HEADER,
    AlertOutcome,
    AlertQueue,
    AlertState,
    ClaimedAlert,
    alert_body,
    delivery_outcome,
    sign,
    tenant_secret,
)
from duetime.egress.resolver import GuardedResolver, refused
from duetime.egress.ssrf import TargetRefused
from duetime.logs import event

from .alert_config import AlertConfig

__all__ = ["AlertSender", "SendStats"]

log = logging.getLogger("duetime.reaper.alerts")

_SCHEMES = frozenset({"http", "https"})


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class SendStats:
    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    unrouted: int = 0


@dataclass(frozen=True)
class _Route:
    url: str
    secret: str | None
    tenant: bool  # the tenant's own webhook (guarded), not the operator's


class _Client:
    """One pooled session and the resolver that guards its connections."""

    def __init__(self, guard: GuardedResolver, connections: int) -> None:
        self.guard = guard
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, resolver=guard, use_dns_cache=False),
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )


class AlertSender:
    """Delivers queued alerts; ``run_once(now)`` is one round. Runs on an event loop of its own
    (``alerting.Alerting``), never on the reaper's loop."""

    def __init__(
        self,
        queue: AlertQueue,
        config: AlertConfig,
        *,
        clock: Callable[[], datetime] = utc_now,
        user_agent: str = "duetime-reaper",
    ) -> None:
        self.queue = queue
        self.config = config
        self.clock = clock
        self.user_agent = user_agent
        self._operator: _Client | None = None
        self._tenants: _Client | None = None

    def _clients(self) -> tuple[_Client, _Client]:
        # Created on first use: an aiohttp session belongs to the loop that makes it.
        if self._operator is None or self._tenants is None:
            size = self.config.batch_size
            self._operator = _Client(GuardedResolver(allow_private=True), size)
            self._tenants = _Client(GuardedResolver(allow_private=self.config.allow_private), size)
        return self._operator, self._tenants

    async def aclose(self) -> None:
        for client in (self._operator, self._tenants):
            if client is not None:
                await client.session.close()
        self._operator = self._tenants = None

    async def run_once(self, now: datetime | None = None) -> SendStats:
        """Claim what is due at ``now``, deliver it, record the outcomes; counts what happened."""
        claimed_at = now or self.clock()
        claimed = await asyncio.to_thread(
            self.queue.alerts_claim, claimed_at, self.config.batch_size, self.config.claim_lease
        )
        if not claimed:
            return SendStats()
        outcomes = await asyncio.gather(*(self._attempt(alert) for alert in claimed))
        recorded = await asyncio.to_thread(self.queue.alerts_finish, outcomes)
        for alert, outcome in zip(claimed, outcomes, strict=True):
            self._log(alert, outcome, recorded=outcome.alert_id in recorded)
        counts = {state: 0 for state in AlertState}
        for outcome in outcomes:
            counts[outcome.state] += 1
        return SendStats(
            claimed=len(claimed),
            delivered=counts[AlertState.DELIVERED],
            retrying=counts[AlertState.PENDING],
            failed=counts[AlertState.FAILED],
            unrouted=counts[AlertState.UNROUTED],
        )

    async def prune(self, now: datetime) -> int:
        return await asyncio.to_thread(self.queue.alerts_prune, now - self.config.retention)

    def _route(self, alert: ClaimedAlert) -> _Route | None:
        secret = self.config.secret
        if alert.tenant_webhook and alert.tenant is not None:
            key = tenant_secret(secret, alert.tenant) if secret else None
            return _Route(alert.tenant_webhook, key, tenant=True)
        if self.config.webhook:
            return _Route(self.config.webhook, secret, tenant=False)
        return None

    async def _attempt(self, alert: ClaimedAlert) -> AlertOutcome:
        route = self._route(alert)
        if route is None:
            return AlertOutcome(
                alert.alert_id,
                alert.attempt,
                AlertState.UNROUTED,
                self.clock(),
                error="no webhook for this alert (DUETIME_ALERT_WEBHOOK, tenants.alert_webhook)",
            )
        operator, tenants = self._clients()
        client = tenants if route.tenant else operator
        policy = self.config.retry_policy
        try:
            status = await self._post(client, route, alert)
        except TargetRefused as exc:
            return delivery_outcome(alert, self.clock(), policy, error=str(exc), retryable=False)
        except TimeoutError:
            error = f"no answer within {self.config.timeout.total_seconds():g}s"
            return delivery_outcome(alert, self.clock(), policy, error=error)
        except (aiohttp.ClientError, OSError) as exc:
            refusal = refused(exc)
            if refusal is not None:
                return delivery_outcome(
                    alert, self.clock(), policy, error=str(refusal), retryable=False
                )
            return delivery_outcome(alert, self.clock(), policy, error=_describe(exc))
        return delivery_outcome(alert, self.clock(), policy, status=status)

    async def _post(self, client: _Client, route: _Route, alert: ClaimedAlert) -> int:
        try:
            url = URL(route.url)
        except ValueError:
            raise TargetRefused("the webhook URL is not a valid URL") from None
        if url.scheme not in _SCHEMES or not url.host:
            raise TargetRefused("the webhook URL must be http(s) with a host")
        client.guard.check_literal(url.host)
        body = alert_body(alert)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": self.user_agent,
            "X-Duetime-Alert-Id": str(alert.alert_id),
            "X-Duetime-Alert-Kind": str(alert.kind),
            "X-Duetime-Alert-Attempt": str(alert.attempt),
        }
        if route.secret:
            headers[SIGNATURE_HEADER] = sign(body, route.secret, self.clock())
        async with asyncio.timeout(self.config.timeout.total_seconds()):
            async with client.session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                return response.status

    def _log(self, alert: ClaimedAlert, outcome: AlertOutcome, *, recorded: bool) -> None:
        fields: dict[str, Any] = {
            "alert_id": alert.alert_id,
            "kind": alert.kind,
            "tenant": alert.tenant,
            "attempt": alert.attempt,
        }
        if not recorded:
            # Its claim ran out and another round took it over; that round's outcome counts.
            event(log, "alert.outcome_stale", logging.WARNING, **fields, error=outcome.error)
        elif outcome.state is AlertState.DELIVERED:
            event(log, "alert.delivered", **fields)
        elif outcome.state is AlertState.PENDING and outcome.next_attempt_at is not None:
            retry_in = outcome.next_attempt_at - outcome.at
            event(
                log,
                "alert.retrying",
                logging.WARNING,
                **fields,
                error=outcome.error,
                retry_in_ms=int(retry_in.total_seconds() * 1000),
            )
        elif outcome.state is AlertState.UNROUTED:
            event(log, "alert.unrouted", logging.WARNING, **fields)
        else:
            event(log, "alert.failed", logging.ERROR, **fields, error=outcome.error)


def _describe(exc: BaseException) -> str:
    """An error for the log and the alert row: the class and, for connection errors, the OS
    reason. Never the exception's own text, which may quote the URL."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    return type(exc).__name__
