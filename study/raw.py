"""A study's raw data: its sweeps' runs copied into ``docs/results/<name>/raw/`` in the
harness's ``<sweep>/<job>/`` layout, compacted.

Each complete run keeps ``summary.json``, ``requests.parquet`` without the
:data:`DROPPED` columns (nothing in the report reads them) and zstd-compressed, and its
``preflight.json``; each sweep its ``.calibration/`` files and ``failures.jsonl``; the
peers step's rounds are ``peers.csv``. The
copied summary records the compacted table's sha256 as ``requests_sha256`` (so
``harness.results.complete_summary`` checks the copy truthfully) and, under
``compacted``, what was dropped and the original table's sha256.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness import results
from harness.calibration import record as calibration
from harness.calibration.record import CALIBRATION
from harness.files import atomic_dir, file_digest
from harness.measure.preflight import PREFLIGHT

DROPPED = ("output_token_ids",)  # the biggest column; reports.load leaves it on disk too
CODEC = "zstd"
COMPACTION = (
    f"requests.parquet without {', '.join(f'`{c}`' for c in DROPPED)}, {CODEC}-compressed; "
    "each summary.json records the compacted table's sha256"
)


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_runs` wrote: the runs (``<sweep>/<job>``), their bytes, and the
    largest run's."""

    jobs: tuple[str, ...]
    bytes: int
    largest_bytes: int

    @property
    def runs(self) -> int:
        """How many runs were copied."""
        return len(self.jobs)

    def to_row(self) -> dict[str, object]:
        """The ``raw`` entry of ``study.json`` (``reports --check`` names a run it lists
        that ``raw/`` lacks)."""
        return {"runs": self.runs, "jobs": list(self.jobs), "bytes": self.bytes,
                "largest_bytes": self.largest_bytes, "compaction": COMPACTION}  # fmt: skip


def compact_run(job: Path, out: Path) -> int:
    """Copy the complete run ``job`` into ``out``, compacted; return its bytes there.

    Raises:
        harness.results.IncompleteRun: ``job`` is not complete.
    """
    import pyarrow.parquet as pq

    summary = results.complete_summary(job)
    table = pq.read_table(job / results.REQUESTS)
    table = table.drop_columns([c for c in DROPPED if c in table.column_names])
    out.mkdir(parents=True)
    pq.write_table(table, out / results.REQUESTS, compression=CODEC)
    summary["compacted"] = {
        "dropped_columns": list(DROPPED),
        "compression": CODEC,
        "original_requests_sha256": summary.get(results.REQUESTS_SHA256),
    }
    summary[results.REQUESTS_SHA256] = file_digest(out / results.REQUESTS, None)
    (out / results.SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    if (job / PREFLIGHT).is_file():
        shutil.copy2(job / PREFLIGHT, out / PREFLIGHT)
    return _bytes(out)


def _bytes(run: Path) -> int:
    """The bytes of a copied run's files."""
    return sum(p.stat().st_size for p in run.iterdir())


def copy_runs(
    results_dir: Path,
    sweeps: list[str],
    raw_dir: Path,
    kept: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
) -> Copied:
    """Replace ``raw_dir`` with the complete runs of ``results_dir/<sweep>`` for each sweep
    (partial ones are left out, as the report would), compacted (:func:`compact_run`), and
    the ``files`` of ``results_dir``; a sweep or file in ``kept`` keeps ``raw_dir``'s."""
    sizes, jobs = [], []
    with atomic_dir(raw_dir) as tmp:
        for name in files:
            shutil.copy2(Path(raw_dir if name in kept else results_dir) / name, tmp / name)
        for sweep in sweeps:
            if sweep in kept:
                shutil.copytree(Path(raw_dir) / sweep, tmp / sweep)
                for summary in sorted((tmp / sweep).glob(f"*/{results.SUMMARY}")):
                    sizes.append(_bytes(summary.parent))
                    jobs.append(f"{sweep}/{summary.parent.name}")
                continue
            source, target = Path(results_dir) / sweep, tmp / sweep
            target.mkdir(parents=True)
            for job in sorted(p for p in source.iterdir() if p.is_dir()):
                if job.name.startswith(".") or results.read_summary(job) is None:
                    continue
                sizes.append(compact_run(job, target / job.name))
                jobs.append(f"{sweep}/{job.name}")
            if (source / CALIBRATION).is_dir():
                shutil.copytree(source / CALIBRATION, target / CALIBRATION)
            if (source / results.FAILURES).is_file():
                shutil.copy2(source / results.FAILURES, target / results.FAILURES)
    return Copied(tuple(jobs), sum(sizes), max(sizes, default=0))


def commits(raw_dir: Path) -> set[str]:
    """The commits the runs and calibration measurements under ``raw_dir`` were made at."""
    runs = (results.read_summary(s.parent) for s in raw_dir.glob(f"*/*/{results.SUMMARY}"))
    calibrated = (calibration.load(p) for p in raw_dir.glob(f"*/{CALIBRATION}/*.json"))
    measured = [m for r in calibrated for m in (r or {}).get("measurements", {}).values()]
    found = {((r or {}).get("git") or {}).get("commit") for r in [*runs, *measured]}
    return found - {None}
