"""duetime dispatcher: hold runs from the due topics in a timing wheel, release each at its due_at.

Kafka targets are emitted onto their own topic by the dispatcher itself (the fast path).

Modules, from the pure core out to the process:

* :mod:`~duetime_dispatcher.routing` — a due record's routing from its headers, its bytes kept
  to be forwarded untouched;
* :mod:`~duetime_dispatcher.fast_path` — a Kafka target's record, planned before its due time;
* :mod:`~duetime_dispatcher.ledger` — in-order acks per partition (the commit never passes a
  held run);
* :mod:`~duetime_dispatcher.holding` — the timing wheel, de-duplication on (run_id, attempt),
  release and lateness bookkeeping; clock-free;
* :mod:`~duetime_dispatcher.backpressure` — the cap on held runs: pause, resume, shed;
* :mod:`~duetime.clock_offset` (shared with the workers) — this host's clock offset from the
  database clock;
* :mod:`~duetime_dispatcher.publisher` — the producer to ``runs.ready`` and job topics;
* :mod:`~duetime_dispatcher.recorder` — the fast path's successes into PostgreSQL, batched;
* :mod:`~duetime_dispatcher.app` — the faust app wiring them together;
* :mod:`~duetime_dispatcher.service` — the process entry point (``main``).

docs/dispatcher.md explains holding, acking, de-duplication and lateness.
"""
