"""``python -m bench``: run every benchmark module (bench/bench_*.py); each writes its report.

``python -m bench bench_schedule ...`` runs the named modules only; ``python -m bench spike ...``
runs one scenario of the spike benchmark (``python -m bench spike --help``); ``python -m bench
scan [--sizes 10k,1M]`` the due-scan benchmark (``make bench-scan``); ``python -m bench ingest
[--n N]`` job definitions through ``duetime jobs apply`` and the jobs topic (``make bench-ingest``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main() -> int:
    if sys.argv[1:2] == ["spike"]:
        from bench.bench_spike import spike_command

        return spike_command(sys.argv[2:])
    if sys.argv[1:2] == ["ingest"]:
        from bench.bench_ingest import ingest_command

        return ingest_command(sys.argv[2:])
    if sys.argv[1:2] == ["scan"]:
        from bench.bench_scan import scan_command

        return scan_command(sys.argv[2:])
    names = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    wanted = set(sys.argv[1:])
    for name in names:
        if wanted and name not in wanted:
            continue
        print(f"== {name}", flush=True)
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
