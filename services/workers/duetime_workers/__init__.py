"""duetime workers: pull runs from ``runs.ready``, claim, execute the target, complete.

Public API (everything else is private to the package and may change)::

    main(argv)        the ``worker`` service entry point (``python -m duetime_workers``)
    WorkerService     the service object, for embedding (tests start it in-process)
    WorkerConfig      its frozen settings

Module map: ``consumer`` (backpressure, commits) → ``attempt`` (claim, lease, complete) →
``targets`` → ``http_target`` / ``kafka_target``; pure rules in ``outcome``, ``decision``,
``headers``, ``lease``, ``offsets`` (the SSRF policy is ``duetime.egress``); I/O adapters in
``transport``, ``producer``, ``blocking``, ``announce``.
"""

from .config import WorkerConfig
from .service import main
from .worker import WorkerService

__all__ = ["WorkerConfig", "WorkerService", "main"]
