"""Alerts: signed webhook deliveries of dead runs and of conditions an operator must know about.

Public API (everything else is private to the package)::

    AlertKind, AlertState        the kinds raised and the states of a queued alert
    NewAlert, ClaimedAlert       an alert to enqueue; one claimed for a delivery attempt
    AlertOutcome                 what a delivery attempt came to
    AlertQueue                   the storage port the sender needs
    alert_body, delivery_outcome the JSON a receiver gets; how an attempt is classified
    ConditionState, Transition, step   when a condition alert fires and resolves
    sign, verify, tenant_secret  the X-Duetime-Signature header, for senders and receivers
    SignatureError, SIGNATURE_HEADER, DEFAULT_TOLERANCE

All of it is pure; the sender, the condition checks and the queue's SQL live with the reaper and
the store. docs/runs.md ("Alerts") describes the whole path.
"""

from .condition import ConditionState, Transition, step
from .model import (
    CONDITION_KINDS,
    AlertKind,
    AlertOutcome,
    AlertState,
    ClaimedAlert,
    Detail,
    NewAlert,
    alert_body,
    delivery_outcome,
)
from .ports import AlertQueue
from .signature import (
    DEFAULT_TOLERANCE,
    SIGNATURE_HEADER,
    SignatureError,
    sign,
    tenant_secret,
    verify,
)

__all__ = [
    "CONDITION_KINDS",
    "DEFAULT_TOLERANCE",
    "SIGNATURE_HEADER",
    "AlertKind",
    "AlertOutcome",
    "AlertQueue",
    "AlertState",
    "ClaimedAlert",
    "ConditionState",
    "Detail",
    "NewAlert",
    "SignatureError",
    "Transition",
    "alert_body",
    "delivery_outcome",
    "sign",
    "step",
    "tenant_secret",
    "verify",
]
