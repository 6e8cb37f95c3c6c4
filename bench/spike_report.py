"""bench/reports/spike.md and spike.png from the spike benchmark's result objects.

Each target of issue 6 is stated as met or missed, with by how much; a target whose scenario did
not run (or failed) says so. The plot shows lateness over time per scenario from the
``timeline`` bins kept in each result (so the report can be rebuilt from spike.json alone:
``python -m bench.spike_report [bench/results/spike.json]``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "evaluate", "write_report"]

Result = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One figure of the issue's targets: which scenario, which value, the bound."""

    label: str
    scenario: tuple[str, str, int, bool]  # (scenario, target, n or 0 for "any", with far future)
    figure: str
    read: Callable[[Result], float | None]
    bound: float
    at_most: bool  # True: value <= bound; False: value >= bound
    unit: str


def _get(*keys: str) -> Callable[[Result], float | None]:
    def read(result: Result) -> float | None:
        value: Any = result
        for key in keys:
            if not isinstance(value, dict) or value.get(key) is None:
                return None
            value = value[key]
        return float(value)

    return read


TARGETS: tuple[Target, ...] = (
    Target("20k Kafka runs due at T: start lateness p99", ("spike", "kafka", 20_000, False),
           "p99", _get("start_lateness_ms", "p99"), 100, True, "ms"),
    Target("100k Kafka runs due at T: start lateness p99", ("spike", "kafka", 100_000, False),
           "p99", _get("start_lateness_ms", "p99"), 250, True, "ms"),
    Target("100k Kafka runs due at T: last start after T", ("spike", "kafka", 100_000, False),
           "last start", _get("last_start_after_t_s"), 0.5, True, "s"),
    Target("20k HTTP runs due at T: last request after T", ("spike", "http", 20_000, False),
           "last start", _get("last_start_after_t_s"), 1.0, True, "s"),
    Target("steady Kafka targets: runs/s (succeeded)", ("steady", "kafka", 0, False),
           "runs/s", _get("runs_per_s"), 15_000, False, "/s"),
    Target("steady Kafka targets, stretch: runs/s", ("steady", "kafka", 0, False),
           "runs/s", _get("runs_per_s"), 25_000, False, "/s"),
    Target("steady HTTP targets: runs/s (succeeded)", ("steady", "http", 0, False),
           "runs/s", _get("runs_per_s"), 5_000, False, "/s"),
    Target("100k runs published before T (issue: 100k cron jobs; here `at` jobs)",
           ("spike", "kafka", 100_000, False), "ahead", _get("planned_ahead_s"), 30, False, "s"),
)  # fmt: skip


def _find(results: Sequence[Result], key: tuple[str, str, int, bool]) -> Result | None:
    scenario, target, n, future = key
    for r in results:
        if (
            r.get("scenario") == scenario
            and r.get("target") == target
            and (n == 0 or r.get("n") == n)
            and bool(r.get("future_jobs")) == future
            and "error" not in r
        ):
            return r
    return None


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "/s":
        return f"{value:,.0f} runs/s"
    return f"{value:,.0f} {unit}"


def _verdict(value: float, bound: float, at_most: bool, unit: str) -> str:
    met = value <= bound if at_most else value >= bound
    if met:
        return "**met**"
    gap = value - bound if at_most else bound - value
    factor = value / bound if at_most else (bound / value if value > 0 else float("inf"))
    return f"**missed** by {_fmt(gap, unit)} ({factor:.1f}x)"


def evaluate(results: Sequence[Result]) -> list[tuple[str, str, str, str]]:
    """(target, bound, measured, verdict) for every target, the far-future comparison and lost."""
    rows: list[tuple[str, str, str, str]] = []
    for t in TARGETS:
        bound = f"{'≤' if t.at_most else '≥'} {_fmt(t.bound, t.unit)}"
        found = _find(results, t.scenario)
        value = None if found is None else t.read(found)
        if value is None:
            rows.append((t.label, bound, "not measured", "**not measured**"))
        else:
            rows.append(
                (t.label, bound, _fmt(value, t.unit), _verdict(value, t.bound, t.at_most, t.unit))
            )
    rows.extend(_far_future(results))
    for r in results:
        if "error" in r:
            continue
        name = _name(r)
        lost = r.get("lost")
        rows.append(
            (
                f"{name}: lost",
                "0",
                str(lost),
                "**met**" if lost == 0 else f"**missed** ({lost} runs)",
            )
        )
    return rows


def _far_future(results: Sequence[Result]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    pairs = (
        ("spike", "kafka", "start p99", _get("start_lateness_ms", "p99"), True, "ms"),
        ("spike", "kafka", "last start", _get("last_start_after_t_s"), True, "s"),
        ("steady", "kafka", "runs/s", _get("runs_per_s"), False, "/s"),
    )
    for scenario, target, label, read, lower_better, unit in pairs:
        with_future = _find(results, (scenario, target, 0, True))
        empty = None
        if with_future is not None:
            empty = _find(results, (scenario, target, int(with_future["n"]), False))
        title = f"{scenario} {target} with far-future jobs stored: {label} within 10 %"
        if with_future is None or empty is None:
            rows.append((title, "±10 %", "not measured", "**not measured**"))
            continue
        a, b = read(empty), read(with_future)
        if a is None or b is None or a == 0:
            rows.append((title, "±10 %", "no figure", "**not measured**"))
            continue
        change = (b - a) / a * 100
        worse = change if lower_better else -change
        measured = f"{_fmt(a, unit)} → {_fmt(b, unit)} ({change:+.0f} %)"
        verdict = "**met**" if worse <= 10 else f"**missed** by {worse - 10:.0f} points"
        rows.append((title, "≤ 10 % worse", measured, verdict))
    return rows


def _name(r: Result) -> str:
    future = f" + {r['future_jobs']:,} far-future jobs" if r.get("future_jobs") else ""
    unit = "runs/s wanted" if r.get("scenario") == "steady" else "jobs due at T"
    return f"{r.get('scenario')} {r.get('target')} {r.get('n'):,} {unit}{future}"


def _p(figures: dict[str, float] | None) -> str:
    if not figures:
        return "–"
    return f"{figures['p50']:,.0f} / {figures['p99']:,.0f} / {figures['max']:,.0f}"


def _v(value: Any, spec: str = "") -> str:
    return "–" if value is None else format(value, spec)


def _figures_table(results: Sequence[Result]) -> list[str]:
    lines = [
        "| scenario | start lateness p50 / p99 / max (ms) | release lateness p50 / p99 / max (ms)"
        " | last start after T (s) | runs/s | published before T (s) | lost | duplicates"
        " | apply (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {_name(r)} | failed: {r['error']} | | | | | | | |")
            continue
        lines.append(
            f"| {_name(r)} | {_p(r.get('start_lateness_ms'))} | {_p(r.get('release_lateness_ms'))}"
            f" | {_v(r.get('last_start_after_t_s'), '.3f')} | {_v(r.get('runs_per_s'), ',.0f')}"
            f" | {_v(r.get('planned_ahead_s'), '.1f')} | {_v(r.get('lost'))}"
            f" | {_v(r.get('duplicates'))} | {_v(r.get('apply_s'), '.1f')} |"
        )
    return lines


def _details(results: Sequence[Result]) -> list[str]:
    lines: list[str] = []
    for r in results:
        if "error" in r:
            continue
        db = r.get("db") or {}
        states = ", ".join(f"{k} {v:,}" for k, v in sorted((db.get("states") or {}).items()))
        lines.append(f"- **{_name(r)}** (T = {r.get('t')}):")
        lines.append(
            f"  handler starts {r.get('handler_starts'):,} for {r.get('started'):,} runs;"
            f" runs in PostgreSQL: {states or 'none'}; retried {db.get('retried')};"
            f" never published {db.get('unpublished')}."
        )
        extra = [f"drain (T → last run finished) {_v(r.get('drain_s'))} s"]
        if r.get("scenario") == "steady":
            extra.append(f"handler starts/s in the window {_v(r.get('starts_per_s'), ',.0f')}")
        if r.get("emit_lateness_ms"):
            extra.append(f"target record CreateTime − T p50/p99/max {_p(r['emit_lateness_ms'])} ms")
        extra.append(
            f"releases read from runs.ready {r.get('releases_from_ready'):,}, directly on the"
            f" job's topic {r.get('releases_direct'):,}"
        )
        if r.get("future_insert_s") is not None:
            extra.append(f"far-future insert + VACUUM ANALYZE {r['future_insert_s']} s")
        extra.append(f"scenario wall time {r.get('wall_s')} s")
        lines.append("  " + "; ".join(extra) + ".")
        for note in r.get("notes") or []:
            lines.append(f"  Note: {note}.")
    return lines


def _plot(results: Sequence[Result], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [r for r in results if r.get("timeline")]
    if not shown:
        return False
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 2.4 * len(shown)), squeeze=False)
    for ax, r in zip(axes[:, 0], shown, strict=True):
        rows = r["timeline"]
        t = [row[0] for row in rows]
        ax.plot(t, [row[2] for row in rows], label="p50", lw=1)
        ax.plot(t, [row[3] for row in rows], label="p99", lw=1)
        ax.plot(t, [row[4] for row in rows], label="max", lw=1, ls=":")
        origin = "T" if r.get("scenario") == "spike" else "window start"
        ax.set_title(_name(r), fontsize=9)
        ax.set_xlabel(f"arrival at the target, seconds since {origin}", fontsize=8)
        ax.set_ylabel("start lateness (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        # In a spike every run has the same scheduled_for, so lateness grows with arrival time
        # by construction; the start rate beside it shows how fast the backlog drained.
        width = float(r.get("timeline_bin_s") or 1.0)
        rate = ax.twinx()
        rate.bar(
            t,
            [row[1] / width for row in rows],
            width=width,
            align="edge",
            color="grey",
            alpha=0.25,
        )
        rate.set_ylabel("starts/s (bars)", fontsize=8)
        rate.tick_params(labelsize=7)
        ax.set_zorder(rate.get_zorder() + 1)  # the lateness lines above the bars
        ax.patch.set_visible(False)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _flow_control(results: Sequence[Result]) -> list[str]:
    """The throttled scenario: the observed rate against the limit, the small tenant's wait."""
    rows = [r for r in results if r.get("scenario") == "throttled" and r.get("throttle")]
    if not rows:
        return []
    lines = [
        "## Flow control (throttled scenario)",
        "",
        "One target limited with `duetime targets set bench-throttled --rate L` (burst: one"
        " second's worth), a large tenant with N runs and a small tenant with 10 runs, all due"
        " at T, Kafka targets.",
        "",
        "A token bucket lets `burst + limit × t` runs through in any t seconds, so the most"
        " starts in one second may reach burst + limit; the sustained rate is (runs − burst) /"
        " (last start − first start).",
        "",
        "| N + small | limit (runs/s) | burst | most starts in any 1 s | sustained rate (runs/s) |"
        " small tenant start lateness p50 / p99 / max (ms) | lost | duplicates |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t = r["throttle"]
        small = t.get("small_tenant_start_lateness_ms") or {}
        lines.append(
            f"| {r.get('n'):,} + {t.get('small_tenant_started')} | {t.get('limit_per_s'):g} |"
            f" {t.get('burst')} | {t.get('observed_max_per_s')} | {t.get('sustained_per_s')} |"
            f" {_ms3(small)} | {r.get('lost')} | {r.get('duplicates')} |"
        )
    return [*lines, ""]


def _ms3(p: dict[str, Any]) -> str:
    if not p:
        return "–"
    return " / ".join(f"{p.get(k, 0):,.0f}" for k in ("p50", "p99", "max"))


def write_report(results: Sequence[Result], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_path = path.with_suffix(".png")
    plotted = _plot(results, plot_path)
    lines = [
        "# Spike benchmark",
        "",
        "Written by `make bench-spike` (bench/bench_spike.py); the figures are in"
        " bench/results/spike.json. One scenario: `python -m bench spike --target kafka|http"
        " --n N [--future-jobs M] [--scenario spike|steady|throttled] [--spread]`.",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()};"
        f" python {platform.python_version()}",
        f"- wall time of the scenarios: {sum(r.get('wall_s') or 0 for r in results) / 60:.1f} min",
        "- set-up: every scenario starts a fresh `duetime up --data-dir <tmp>` (embedded"
        " PostgreSQL, broker and etcd, the services with their defaults, no tuning), with"
        " `DUETIME_ALLOW_PRIVATE_TARGETS=1` only because the HTTP target listens on 127.0.0.1,"
        " and `--summary-every 0` (the console's periodic query of the runs table). The"
        " targets, the benchmark and the whole system share this machine's cores.",
        "",
        "## Targets",
        "",
        "| target | bound | measured | verdict |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in evaluate(results)),
        "",
        "## Figures",
        "",
        *_figures_table(results),
        "",
        *_details(results),
        "",
        *_flow_control(results),
    ]
    if plotted:
        lines += [
            "## Lateness over time",
            "",
            f"![start lateness over time per scenario]({plot_path.name})",
            "",
            "Per bin of arrival time (100 ms for spikes, 1 s for steady windows): p50, p99"
            " and max of the start lateness of the runs that arrived in it.",
            "",
        ]
    lines += [
        "## How it is measured",
        "",
        "- **Spike**: N one-off `at` jobs due at the same instant T, applied in one"
        " transaction through `jobs_apply` (what `duetime jobs apply` does). T is chosen"
        " after timing a rolled-back apply of 1,000 of them: the estimated apply time × 1.5 +"
        " 2 s + the planner's default lookahead + 10 s, so the planner has its whole lookahead"
        " before T. *published before T* = T − the last `published_at` of the runs.",
        "- **Steady**: K interval jobs `PT1S` (K runs due at every whole second), a 30 s"
        " warm-up after the apply (the planner's first lookahead), then a window (60 s) of"
        " K × 60 runs; afterwards the jobs are paused and the window's runs drain."
        " *runs/s* = runs that reached `succeeded` with `finished_at` inside the window, per"
        " second. *published before T* = the"
        " smallest scheduled_for − published_at in the window.",
        "- **Start lateness** = the first handler start of a run minus its scheduled_for:"
        " an HTTP request received by the target (a hand-written HTTP/1.1 keep-alive server"
        " in its own process answering 200), or a record of the job's topic received by a"
        " consumer in its own process (every partition assigned from the beginning,"
        " `fetch.wait.max.ms=10`: the embedded broker answers fetches by polling, so this"
        " bounds what the consumer adds to about 5-10 ms).",
        "- **Release lateness** = CreateTime of the run's `runs.ready` record (the"
        " dispatcher's produce time) minus its due_at, read back after the scenario so the"
        " reader adds no broker load; a Kafka-target run released directly onto the job's"
        " topic has no such record, and its target record's CreateTime is used instead.",
        "- **lost** = expected runs (N, or K × window seconds) that never reached the target"
        " before the drain timeout (90 s after T, 60 s after a steady window);"
        " **duplicates** = handler starts beyond one per (run_id, attempt). PostgreSQL is"
        " checked afterwards for runs not `succeeded`. A steady load above what the"
        " machine sustains leaves a backlog: its `lost` counts the window's occurrences"
        " not started by the drain deadline, the runs still `scheduled` in PostgreSQL"
        " (they run later) and the occurrences not yet planned when the benchmark paused"
        " the jobs (a paused job's unplanned occurrences are not run); the notes give the"
        " states of the runs the planner had created.",
        "- **Far-future jobs** are set-up only: one `INSERT ... SELECT ... FROM"
        " generate_series` of one-off jobs due a year ahead (columns from a validated"
        " definition, shard by the project's hash), then `VACUUM ANALYZE`.",
        "",
        "## Known weaknesses of the measurement",
        "",
        "- Everything shares 2 cores: the recorders take CPU from the system they measure,"
        " more so in the steady scenarios. The HTTP target costs about 90 µs of CPU per"
        " request, most of it kernel socket time (about half a core at 5,000 requests/s).",
        "- Steady runs fall due in bursts of K at each whole second (interval jobs anchored"
        " at the epoch), not spread evenly within the second.",
        "- A Kafka target's start time is when the client handed the record over (records"
        " that arrived together share one time); the broker's fetch polling adds up to ~10 ms.",
        "- The far-future table is filled by SQL, not through the product's write path.",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "results" / "spike.json"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else here / "reports" / "spike.md"
    write_report(json.loads(source.read_text(encoding="utf-8")), target)
