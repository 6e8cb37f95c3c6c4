"""``duetime replay`` (a topic again, from a timestamp) and ``duetime reemit`` (run events again,
from the database, when a topic's retention has passed). docs/consumers.md has the details."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from confluent_kafka import KafkaError, Message, Producer

from duetime.bus.kafka import producer_config
from duetime.bus.records import RUN_DEAD, RUN_EVENTS
from duetime.bus.replay import (
    ReplayedRecord,
    ReplayStats,
    codecs_by_fingerprint,
    read_since,
    to_json,
)
from duetime.bus.run_headers import routing_headers
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import BusError, InvalidInput
from duetime.events import RunDead
from duetime.model import HttpTarget
from duetime.store.reemit import StoredRun, runs_reemit

from ._store import check_broker, cli_clusters, cli_settings

__all__ = ["REEMITTED_HEADER", "register"]

#: On every re-emitted record, so a consumer can tell a copy from the original.
REEMITTED_HEADER = "duetime-reemitted"
_TERMINAL = ("succeeded", "dead", "skipped", "cancelled")
Headers = list[tuple[str, str | bytes | None]]


def register(sub: Any) -> None:
    replay = sub.add_parser(
        "replay",
        help="read a topic again from a timestamp: print its records (decoded) or re-publish them",
    )
    replay.add_argument(
        "--topic", required=True, help="a duetime topic, with or without the prefix (runs.ready)"
    )
    replay.add_argument("--since", required=True, help="ISO-8601 instant with an offset or Z")
    replay.add_argument("--until", help="ISO-8601 instant; records before it (default: all)")
    where = replay.add_mutually_exclusive_group()
    where.add_argument("--to", metavar="TOPIC", help="re-publish the records (key, headers kept)")
    where.add_argument("--out", type=Path, help="write the JSON lines to FILE (default stdout)")
    replay.set_defaults(func=_replay)

    reemit = sub.add_parser(
        "reemit",
        help="publish the run events of a time range again, from the database",
    )
    reemit.add_argument("--from", dest="since", required=True, help="ISO-8601 instant (from)")
    reemit.add_argument("--to", dest="until", required=True, help="ISO-8601 instant (before)")
    reemit.add_argument("--job", help="only this job's runs")
    reemit.add_argument(
        "--topic",
        choices=("ready", "dead"),
        default="ready",
        help="ready (default): the run event of every ended run on runs.ready; "
        "dead: the dead record of every dead run on runs.dead",
    )
    reemit.set_defaults(func=_reemit)


def parse_instant(field: str, raw: str) -> datetime:
    """An ISO-8601 instant that says its offset (``Z`` or ``+02:00``)."""
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise InvalidInput(field, f"not an ISO-8601 instant: {raw!r}") from None
    if value.tzinfo is None:
        raise InvalidInput(field, f"{raw!r} has no offset; add Z or +HH:MM")
    return value.astimezone(UTC)


def resolve_topic(catalog: TopicCatalog, name: str) -> str:
    """``runs.ready`` and ``duetime.runs.ready`` both name the catalog's topic; any other name
    (a Kafka target's own topic) is taken as it is."""
    known = {spec.name for spec in catalog.all()}
    if name in known:
        return name
    if catalog.prefix + name in known:
        return catalog.prefix + name
    return name


def _range(since: datetime, until: datetime | None) -> None:
    if until is not None and until <= since:
        raise InvalidInput("--until", "must be after --since")


def _replay(args: argparse.Namespace) -> int:
    since = parse_instant("--since", args.since)
    until = parse_instant("--until", args.until) if args.until else None
    _range(since, until)
    settings = cli_settings()
    catalog = TopicCatalog(settings.topic_prefix)
    topic = resolve_topic(catalog, args.topic)
    destination = resolve_topic(catalog, args.to) if args.to else None
    if destination == topic:
        raise InvalidInput("--to", "must differ from --topic (the replay would read its copies)")
    check_broker(settings)
    stats = ReplayStats()
    records = read_since(settings, topic, since, until, stats=stats)
    if destination is not None:
        sent = _republish(settings, destination, records)
        what = f"republished={sent} to={destination}"
    else:
        with _output(args.out) as out:
            codecs = codecs_by_fingerprint()
            for record in records:
                out.write(json.dumps(to_json(record, codecs), ensure_ascii=False) + "\n")
        what = f"printed={stats.returned}" + (f" out={args.out}" if args.out else "")
    sought = ",".join(f"{p}:{o}" for p, o in sorted(stats.sought.items()))
    print(
        f"replay topic={topic} partitions={stats.partitions} sought={sought} read={stats.read} "
        f"skipped_older={stats.older} skipped_newer={stats.newer} {what}",
        file=sys.stderr,
    )
    return 0


@contextmanager
def _output(path: Path | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    with path.open("w", encoding="utf-8") as handle:
        yield handle


class _Sender:
    """A producer that counts what the broker acknowledged and keeps the first failure."""

    def __init__(self, settings: Settings) -> None:
        self.producer = Producer(producer_config(settings))
        self.acked = 0
        self.error: str | None = None

    def _report(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked += 1
        elif self.error is None:
            self.error = str(error)

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=self._report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
        self.producer.poll(0)

    def finish(self, expected: int) -> int:
        left = self.producer.flush(30)
        if left or self.error is not None or self.acked != expected:
            raise BusError(
                f"{expected - self.acked} of {expected} records not acknowledged"
                + (f": {self.error}" if self.error else "")
            )
        return self.acked


def _republish(settings: Settings, topic: str, records: Iterable[ReplayedRecord]) -> int:
    sender = _Sender(settings)
    count = 0
    for record in records:
        headers: Headers = list(record.headers)
        sender.send(topic, record.key, record.value, headers)
        count += 1
    return sender.finish(count)


def _reemit(args: argparse.Namespace) -> int:
    since = parse_instant("--from", args.since)
    until = parse_instant("--to", args.until)
    if until <= since:
        raise InvalidInput("--to", "must be after --from")
    settings = cli_settings()
    catalog = TopicCatalog(settings.topic_prefix)
    clusters = cli_clusters(settings)
    check_broker(settings)
    topic = catalog.ready if args.topic == "ready" else catalog.dead
    states = _TERMINAL if args.topic == "ready" else ("dead",)
    sender = _Sender(settings)
    sent = skipped = 0
    now = datetime.now(UTC)
    # Each cluster's runs (one job's: its cluster's), page by page.
    stores = [clusters.for_job(args.job)] if args.job else list(clusters)
    pages = (
        page
        for store in stores
        for page in runs_reemit(store, since, until, states=states, job_id=args.job)
    )
    try:
        for page in pages:
            for stored in page:
                record = _event(stored, now) if args.topic == "ready" else _dead(stored)
                if record is None:
                    skipped += 1
                    continue
                sender.send(topic, *record)
                sent += 1
    finally:
        clusters.close()
    acked = sender.finish(sent)
    job = f" job={args.job}" if args.job else ""
    print(
        f"reemit from={since.isoformat()} to={until.isoformat()}{job} topic={topic} "
        f"records={acked} skipped_job_deleted={skipped}",
        file=sys.stderr,
    )
    return 0


def _event(stored: StoredRun, now: datetime) -> tuple[bytes, bytes, Headers] | None:
    """The run event of the run's last attempt, as the planner publishes it, marked re-emitted.

    A run whose job is gone has no target to put in it (None). The job's *current* target and
    policies are used: the database keeps no copy per run.
    """
    row = stored.run
    if row.target is None:
        return None
    attempt = max(row.attempt, 1)
    event = row.event(attempt)
    kind = "http" if isinstance(row.target, HttpTarget) else "kafka"
    headers: Headers = [
        *RUN_EVENTS.headers(),
        *routing_headers(
            row.run_id,
            attempt,
            row.due_at,
            kind,
            now,
            target_service=row.target_service,
            tenant=row.tenant,
        ),
        (REEMITTED_HEADER, b"1"),
    ]
    return str(row.run_id).encode("ascii"), RUN_EVENTS.encode(event), headers


def _dead(stored: StoredRun) -> tuple[bytes, bytes, Headers]:
    row = stored.run
    dead = RunDead(
        run_id=row.run_id,
        job_id=row.job_id,
        tenant=row.tenant,
        scheduled_for=row.scheduled_for,
        attempts=row.attempt,
        dead_at=stored.finished_at or row.scheduled_for,
        last_error=stored.last_error,
    )
    headers: Headers = [*RUN_DEAD.headers(), (REEMITTED_HEADER, b"1")]
    return str(row.run_id).encode("ascii"), RUN_DEAD.encode(dead), headers
