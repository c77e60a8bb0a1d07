"""How long the report takes to load (and aggregate) 1,000 runs x 500 requests.

Builds run directories with known numbers in a temporary folder (the tests' fixture,
``tests/run_fixtures.py``, written through the harness's writer), then times
``reports.load.load`` and ``reports.aggregate.aggregate``. The target is under 30 s for
loading.

Run: ``python bench/report_load.py [--runs 1000] [--requests 500]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from reports import aggregate, load

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests/
from tests import run_fixtures


def build(results_dir: Path, n_runs: int, n_requests: int) -> None:
    """Write ``n_runs`` synthetic jobs: the seed study's grid, repeated over seeds."""
    grid = run_fixtures.seed_study_jobs("bench", n_problems=n_requests, detailed=True)
    for i, job in enumerate(itertools.islice(itertools.cycle(grid), n_runs)):
        run_fixtures.write_job(results_dir, replace(job, seed=i // len(grid)))


def main() -> None:
    """Build, load, aggregate; print the timings."""
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--runs", type=int, default=1000)
    cli.add_argument("--requests", type=int, default=500)
    args = cli.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build(Path(tmp), args.runs, args.requests)
        t1 = time.perf_counter()
        results = load.load(tmp)
        t2 = time.perf_counter()
        table = aggregate.aggregate(results.requests, results.runs)
        t3 = time.perf_counter()
    print(f"built {args.runs} runs x {args.requests} requests in {t1 - t0:.1f} s")
    print(f"load: {t2 - t1:.2f} s ({len(results.requests):,} requests, {len(results.runs)} runs)")
    print(f"aggregate: {t3 - t2:.2f} s ({len(table)} groups, bootstrap CIs included)")


if __name__ == "__main__":
    main()
