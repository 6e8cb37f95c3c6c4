"""``duetime up --demo`` applies its jobs once a dispatcher and a worker consume."""

from __future__ import annotations

from duetime.cli.demo import PipelineJoined


def test_ready_once_a_dispatcher_and_a_worker_consume() -> None:
    joined = PipelineJoined()
    joined.observe("planner", "INFO planner planner.started member=x")
    joined.observe("worker", "INFO worker worker.started worker_id=x-0")
    joined.observe("dispatcher", "INFO dispatcher [^-_ServiceApp]: Starting...")
    assert not joined.ready.is_set()
    joined.observe("worker", "INFO worker consumer.assigned partitions=duetime.runs.ready[0]")
    assert not joined.ready.is_set()  # the dispatcher has not joined its group yet
    joined.observe("dispatcher-1", "INFO dispatcher dispatcher.started group=duetime.dispatcher")
    assert joined.ready.is_set()


def test_a_marker_from_another_service_does_not_count() -> None:
    joined = PipelineJoined()
    joined.observe("reaper", "consumer.assigned dispatcher.started")
    joined.observe("api", "consumer.assigned dispatcher.started")
    assert not joined.ready.is_set()
