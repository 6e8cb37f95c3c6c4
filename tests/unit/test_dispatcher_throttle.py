"""The dispatcher's throttle: who waits, who goes first (weighted round robin), what is kept."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from duetime.flow import TargetLimit
from duetime_dispatcher.holding import Release, Source
from duetime_dispatcher.ledger import Claim
from duetime_dispatcher.routing import Routed
from duetime_dispatcher.throttle import FairQueue, Throttle

T0 = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)


def _release(target: str | None, tenant: str, offset: int = 0, *, due_s: float = 0) -> Release[Any]:
    run_id = uuid.uuid4()
    routed = Routed(
        str(run_id).encode(),
        1,
        T0 + timedelta(seconds=due_s),
        "http",
        b"",
        [],
        target_service=target,
        tenant=tenant,
    )
    source = Source("due", offset % 4, offset)
    return Release(routed, source, T0, Claim(source.tp, offset, None), routed.key)


def test_weighted_round_robin_interleaves_tenants_by_weight() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(6):
        queue.add("big", f"b{i}")
    for i in range(3):
        queue.add("small", f"s{i}")
    taken = [item for _t, item in queue.take(7, {"big": 2})]
    assert taken == ["b0", "b1", "s0", "b2", "b3", "s1", "b4"]
    # The turn carries over to the next take: big had one of two left.
    assert [item for _t, item in queue.take(10, {"big": 2})] == ["b5", "s2"]
    assert len(queue) == 0


def test_put_back_returns_items_to_the_front_in_order() -> None:
    queue: FairQueue[str] = FairQueue()
    for item in ("a0", "a1", "a2"):
        queue.add("a", item)
    queue.add("b", "b0")
    taken = queue.take(3, {})
    assert [i for _t, i in taken] == ["a0", "b0", "a1"]
    queue.put_back(taken[1:])
    assert len(queue) == 3
    assert sorted(i for _t, i in queue.take(10, {})) == ["a1", "a2", "b0"]


def test_only_runs_of_limited_targets_wait() -> None:
    throttle: Throttle[Any] = Throttle()
    limited, free, old = _release("api", "t1"), _release("other", "t1"), _release(None, "t1")
    assert throttle.admit([limited, free, old]) == [limited, free, old]  # no limits known yet
    throttle.set_limits({"api": TargetLimit(rate=10.0)}, {})
    assert throttle.admit([limited, free, old]) == [free, old]
    assert throttle.waiting == 1
    throttle.set_limits({"*": TargetLimit(max_in_flight=3)}, {})
    assert throttle.admit([free]) == []  # the default limits every target


def test_a_small_tenant_is_not_stuck_behind_a_large_one() -> None:
    throttle: Throttle[Any] = Throttle(max_request=50)
    throttle.set_limits({"api": TargetLimit(rate=10.0)}, {})
    big = [_release("api", "big", i) for i in range(5000)]
    small = [_release("api", "small", i) for i in range(10)]
    assert throttle.admit(big + small) == []
    sent: list[Release[Any]] = []
    for _ in range(2):  # two grants of 10 each
        (request,) = throttle.requests()
        assert len(request.candidates) == 50
        sent += throttle.granted({"api": 10}, T0)
    assert sum(1 for r in sent if r.routed.tenant == "small") == 10
    assert throttle.waiting == 5010 - 20
    # What was asked but not granted keeps its place: the big tenant's oldest come next.
    (request,) = throttle.requests()
    first = throttle.granted({"api": 1}, T0)
    assert first[0].routed.tenant == "big"


def test_a_failed_grant_releases_nothing_and_loses_nothing() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"api": TargetLimit(rate=1.0)}, {})
    throttle.admit([_release("api", "t", i) for i in range(5)])
    throttle.requests()
    assert throttle.granted({}, T0) == []
    assert throttle.waiting == 5


def test_revoked_partitions_drop_their_waiting_runs_and_shedding_takes_the_latest() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"api": TargetLimit(rate=1.0)}, {})
    waiting = [_release("api", "t", i, due_s=i) for i in range(8)]
    throttle.admit(waiting)
    assert throttle.revoke({("due", 0)}) == 2  # offsets 0 and 4
    shed = throttle.shed(2)
    assert [r.routed.due_at for r in shed] == [T0 + timedelta(seconds=7), T0 + timedelta(seconds=6)]
    assert throttle.waiting == 4
    assert throttle.waiting_per_target() == {"api": 4}
    assert throttle.oldest_wait(T0 + timedelta(seconds=10)) == timedelta(seconds=9)


def test_fast_path_emissions_hold_no_in_flight_slot() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"kafka:events": TargetLimit(max_in_flight=2)}, {})
    release = _release("kafka:events", "t")
    emitted = _release("kafka:events", "t")
    object.__setattr__(emitted, "routed", _with_emission(emitted.routed))
    throttle.admit([release, emitted])
    (request,) = throttle.requests()
    assert [c.slot for c in request.candidates] == [True, False]


def _with_emission(routed: Routed) -> Routed:
    from dataclasses import replace

    from duetime_dispatcher.fast_path import Emission

    return replace(routed, emission=Emission.__new__(Emission))


def _missed(target: str, tenant: str, offset: int = 0) -> Release[Any]:
    release = _release(target, tenant, offset)
    release.routed = replace(release.routed, catch_up=True)
    return release


def test_missed_runs_pass_the_drain_then_their_own_target() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"@catch-up": TargetLimit(rate=100.0), "api": TargetLimit(rate=10.0)}, {})
    on_time_free, on_time_api = _release("free", "t"), _release("api", "t")
    missed_free, missed_api = _missed("free", "t", 1), _missed("api", "t", 2)
    # On-time runs never queue behind the drain; missed ones all wait for it.
    assert throttle.admit([on_time_free, on_time_api, missed_free, missed_api]) == [on_time_free]
    assert throttle.waiting_per_target() == {"api": 1, "@catch-up": 2}
    requests = {r.target_service: r for r in throttle.requests()}
    assert [c.slot for c in requests["@catch-up"].candidates] == [False, False]
    leaving = throttle.granted({"@catch-up": 2, "api": 1}, T0)
    # Through the drain, the free target's run leaves; the api one now waits for api's grant.
    assert leaving == [on_time_api, missed_free]
    assert throttle.waiting_per_target() == {"api": 1}
    throttle.requests()
    assert throttle.granted({"api": 1}, T0) == [missed_api]
    assert throttle.waiting == 0


def test_without_the_drain_row_missed_runs_are_not_held() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"api": TargetLimit(rate=10.0)}, {})
    missed = _missed("free", "t")
    assert throttle.admit([missed]) == [missed]


def test_with_only_the_drain_limited_on_time_runs_go_and_missed_ones_wait_for_it() -> None:
    throttle: Throttle[Any] = Throttle()
    throttle.set_limits({"@catch-up": TargetLimit(rate=100.0)}, {})
    on_time = [_release("free", "t", n) for n in range(3)]
    assert throttle.admit(on_time) is on_time  # nothing to hold back: the list as it came
    missed = _missed("free", "t", 3)
    assert throttle.admit([on_time[0], missed, on_time[1]]) == [on_time[0], on_time[1]]
    assert throttle.waiting_per_target() == {"@catch-up": 1}
    throttle.requests()
    assert throttle.granted({"@catch-up": 1}, T0) == [missed]
    # Through the drain it goes like any run (its own target has no limit).
    assert missed.drained and throttle.admit([missed]) == [missed]
