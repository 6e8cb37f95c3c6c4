"""The schedule benchmark runs and reports (on a small workload, to stay fast)."""

from __future__ import annotations

from bench.bench_schedule import distinct_specs, midnight_workload, render, run


def test_workload_has_the_requested_shape() -> None:
    assert len(set(distinct_specs(50))) == 50
    workload = midnight_workload(500, 50)
    assert len(workload) == 500 and len(set(workload)) == 50


def test_benchmark_runs_and_renders() -> None:
    results = run(jobs=2_000, distinct=10, repeat=1)
    assert [r.operations for r in results] == [2_000] * 4
    assert all(r.per_second > 0 for r in results)
    report = render(results, 2_000, 10)
    assert report.startswith("# Schedule benchmark")
    assert "midnight batch (cold cache)" in report
