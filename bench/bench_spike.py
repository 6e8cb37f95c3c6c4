"""The midnight-spike benchmark: runs due at the same instant, and a steady load, end to end.

One scenario (what a reviewer runs)::

    python -m bench spike --target kafka|http --n N [--future-jobs M] [--scenario spike|steady]
                          [--duration S] [--spread] [--json PATH]

(``--spread``: a steady load's runs spread over each second instead of all due on the whole
second, so that the dispatcher's releases never pause.)

writes a one-element JSON list to PATH (default bench/results/spike-one.json). The whole set
(``make bench-spike``, or ``python -m bench bench_spike``) writes bench/results/spike.json (one
object per scenario), bench/reports/spike.md and bench/reports/spike.png. Every scenario starts a
fresh ``duetime up`` (bench/spike_system.py); bench/spike_scenario.py says what is measured.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from bench.spike_report import write_report
from bench.spike_scenario import ScenarioConfig, run_scenario

__all__ = ["SCENARIO_SET", "main", "run_one", "run_set"]

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
REPORTS = ROOT / "reports"

# Runs due per second in the steady scenario when --n is not given.
STEADY_DEFAULT_N = {"kafka": 15_000, "http": 5_000}

#: The set ``make bench-spike`` runs: (scenario, target, n, far-future jobs stored).
SCENARIO_SET: tuple[tuple[str, str, int, int], ...] = (
    ("spike", "kafka", 20_000, 0),
    ("spike", "kafka", 100_000, 0),
    ("spike", "http", 20_000, 0),
    ("steady", "kafka", STEADY_DEFAULT_N["kafka"], 0),
    ("steady", "http", STEADY_DEFAULT_N["http"], 0),
    ("spike", "kafka", 20_000, 1_000_000),
    ("steady", "kafka", STEADY_DEFAULT_N["kafka"], 1_000_000),
    # What steady loads this machine does sustain, beside the targets it misses: a light one,
    # and one below the most it keeps up with (10,000 runs/s in single runs since the fifth
    # round of 2026-12-07, 11,000 not).
    ("steady", "kafka", 1_000, 0),
    ("steady", "kafka", 8_000, 0),
    # Flow control: one target limited to 1,000/s, tenants with 50k and 10 runs due at T.
    ("throttled", "kafka", 50_000, 0),
)


def _write_json(path: Path, results: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def _summary(result: dict[str, Any]) -> str:
    start = result.get("start_lateness_ms") or {}
    release = result.get("release_lateness_ms") or {}
    parts = [
        f"{result.get('scenario')} {result.get('target')} n={result.get('n')}",
        f"future={result.get('future_jobs')}",
        f"start p50/p99/max={start.get('p50')}/{start.get('p99')}/{start.get('max')} ms",
        f"release p50/p99/max={release.get('p50')}/{release.get('p99')}/{release.get('max')} ms",
        f"last_start_after_t={result.get('last_start_after_t_s')} s",
        f"runs_per_s={result.get('runs_per_s')}",
        f"planned_ahead={result.get('planned_ahead_s')} s",
        f"lost={result.get('lost')} duplicates={result.get('duplicates')}",
    ]
    notes = result.get("notes") or []
    return "\n  ".join([", ".join(parts), *(f"note: {n}" for n in notes)])


def run_one(config: ScenarioConfig) -> dict[str, Any]:
    try:
        result = run_scenario(config)
    except Exception as exc:  # one failed scenario must not lose the others' figures
        traceback.print_exc()
        result = {
            "scenario": config.scenario,
            "target": config.target,
            "n": config.n,
            "future_jobs": config.future_jobs,
            "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
        }
    print(_summary(result) + (f"\n  error: {result['error']}" if "error" in result else ""))
    return result


def run_set(
    scale: float = 1.0,
    duration: float = 60.0,
    json_path: Path = RESULTS / "spike.json",
    report_path: Path = REPORTS / "spike.md",
) -> list[dict[str, Any]]:
    """Every scenario of :data:`SCENARIO_SET`; ``scale`` shrinks the counts for a quick try."""
    results: list[dict[str, Any]] = []
    for scenario, target, n, future in SCENARIO_SET:
        print(f"== spike benchmark: {scenario} {target} n={n} future_jobs={future}", flush=True)
        config = ScenarioConfig(
            scenario,
            target,
            max(1, int(n * scale)),
            future_jobs=int(future * scale),
            duration=duration,
        )
        results.append(run_one(config))
        _write_json(json_path, results)  # keep what we have if a later one hangs
    write_report(results, report_path)
    return results


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench spike", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--target", choices=("kafka", "http"), default="kafka")
    parser.add_argument("--scenario", choices=("spike", "steady", "throttled"), default="spike")
    parser.add_argument(
        "--limit", type=float, default=1000.0, help="throttled: the target's rate limit (runs/s)"
    )
    parser.add_argument(
        "--n",
        type=int,
        default=None,
        help="spike: jobs due at T (default 20000); steady: runs per second "
        "(default 15000 kafka, 5000 http)",
    )
    parser.add_argument("--future-jobs", type=int, default=0, help="far-future jobs stored first")
    parser.add_argument("--duration", type=float, default=60.0, help="steady: measured window (s)")
    parser.add_argument("--warmup", type=float, default=30.0, help="steady: warm-up (s)")
    parser.add_argument(
        "--lead", type=float, default=None, help="spike: T minus the end of the apply (s)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="seconds after T (spike, default 90) or the window (steady, default 60)",
    )
    parser.add_argument("--fetch-wait-ms", type=int, default=10, help="Kafka target consumer")
    parser.add_argument(
        "--spread",
        action="store_true",
        help="steady: runs due spread over each second (default: all on the whole second)",
    )
    parser.add_argument("--keep-dir", type=Path, default=None, help="keep logs and data here")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="results (default bench/results/spike-one.json, with --set spike.json)",
    )
    parser.add_argument("--report", type=Path, default=REPORTS / "spike.md", help="--set only")
    parser.add_argument(
        "--set",
        action="store_true",
        help="run the whole scenario set instead (what make bench-spike does)",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="--set: multiply every count")
    return parser


def _stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every scenario's clean-up (``finally``) still runs."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def spike_command(argv: list[str]) -> int:
    """``python -m bench spike ...``"""
    args = _parser().parse_args(argv)
    _stop_on_sigterm()
    if args.set:
        results = run_set(
            args.scale, args.duration, args.json or RESULTS / "spike.json", args.report
        )
        return 0 if all("error" not in r for r in results) else 1
    n = args.n
    if n is None:
        n = {"steady": STEADY_DEFAULT_N[args.target], "throttled": 50_000}.get(
            args.scenario, 20_000
        )
    config = ScenarioConfig(
        args.scenario,
        args.target,
        n,
        future_jobs=args.future_jobs,
        duration=args.duration,
        warmup=args.warmup,
        lead=args.lead,
        drain_timeout=args.drain_timeout,
        fetch_wait_ms=args.fetch_wait_ms,
        keep_dir=args.keep_dir,
        limit=args.limit,
        spread=args.spread,
    )
    result = run_one(config)
    path = args.json or RESULTS / "spike-one.json"
    _write_json(path, [result])
    print(f"wrote {path}")
    return 0 if "error" not in result else 1


def main() -> None:
    """``python -m bench`` / ``python -m bench bench_spike``: the whole set."""
    _stop_on_sigterm()
    run_set()


if __name__ == "__main__":
    raise SystemExit(spike_command(sys.argv[1:]))
