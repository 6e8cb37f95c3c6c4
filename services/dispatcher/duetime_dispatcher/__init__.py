"""duetime dispatcher: hold runs from the due topics in a timing wheel, release each at its due_at.

Modules, from the pure core out to the process:

* :mod:`~duetime_dispatcher.ledger` — in-order acks per partition (the commit never passes a
  held run);
* :mod:`~duetime_dispatcher.holding` — the timing wheel, de-duplication on (run_id, attempt),
  release and lateness bookkeeping; clock-free;
* :mod:`~duetime_dispatcher.publisher` — the idempotent producer to ``runs.ready``;
* :mod:`~duetime_dispatcher.app` — the faust app wiring them together;
* :mod:`~duetime_dispatcher.service` — the process entry point (``main``).

docs/dispatcher.md explains holding, acking, de-duplication and lateness.
"""
