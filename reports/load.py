"""Every run under a results directory, as two tidy pandas tables.

A run is a job directory ``<results_dir>/<sweep>/<job>/`` as the harness writes it; only
complete runs (``harness.results.complete_summary``) are read, with the columns the report
needs. Partial or corrupt ones, and jobs the sweep's ``failures.jsonl`` names, are listed
with the reason and skipped. Requests are read column-projected by a thread pool and
concatenated in Arrow; no Python loop runs per request.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import metrics, provenance, results

LEFT_ON_DISK = ("output_token_ids",)  # the biggest column; nothing in the report reads it
# The columns the report needs; the other columns of the harness's schema are optional
# (null when a run lacks them).
REQUIRED = (
    "sweep_id", "run_id", "variant", "target", "draft", "k", "dataset", "difficulty",
    "prompt_style", "temperature", "seed", "concurrency", "problem_id", "output_tokens",
    "correct", "ttft_s", "e2e_s", "tpot_s", "num_spec_steps", "num_draft_tokens",
    "num_accepted_tokens", "acceptance_histogram",
)  # fmt: skip
OPTIONAL = {
    f.name: f.type
    for f in results.request_schema()
    if f.name not in REQUIRED and f.name not in LEFT_ON_DISK
}
COLUMNS = tuple(f.name for f in results.request_schema() if f.name not in LEFT_ON_DISK)
# summary keys that are dicts
NESTED = ("config", "versions", "hardware", "spec", "git", "reference", "phases_s")
SEQUENTIAL = "sequential"  # the pairing of runs recorded before pairing existed
OFFLINE = "offline"  # the backend of runs recorded before backends existed
CLOSED_LOOP = 0.0  # the request_rate column of closed-loop runs (the harness's null)
FIXED_K = "none"  # the k_schedule column of runs at one K for every batch size
# the synthetic_acceptance_length column of runs at their speculator's own acceptance
REAL_ACCEPTANCE = 0.0
NO_DRAFT = "none"  # the draft column's value for variants without a draft
ROLE = "target_role"  # the target's key in the config (base | cot | cod); ``target`` is its model
PROBLEM_SET = ("limit", "dataset_digest")  # added to every request and run (problem_set)
# what the draft's manifest says of its training (``provenance.training``): runs columns
# ``draft_examples``, ..., null for a draft without one and runs recorded before
DRAFT_TRAINING = ("examples", "steps", "train_seconds", "eval_accuracy")


@dataclass(frozen=True)
class Skipped:
    """A run directory left out of the report, and why."""

    path: str
    reason: str

    def to_row(self) -> dict[str, str]:
        """Flat dict for a table of skipped runs."""
        return asdict(self)


@dataclass(frozen=True)
class Results:
    """All loaded runs: one row per request, one row per run, and what was skipped."""

    requests: pd.DataFrame
    runs: pd.DataFrame
    skipped: tuple[Skipped, ...]


class RunError(Exception):
    """A complete run the report cannot use; the message is the reason."""


def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """The sort key of a sweep's ``name`` with its runs of digits compared as numbers
    (a200 before a1000)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def stored_sweeps(results_dir: Path, sweeps: list[str] | None = None) -> list[Path]:
    """The sweep directories under ``results_dir`` to read: all of them, or the named ones.

    Raises:
        ValueError: a named sweep is not under ``results_dir``.
    """
    found = (
        sorted(p for p in results_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if results_dir.is_dir()
        else []
    )
    if not sweeps:
        return found
    names = {p.name for p in found}
    for sweep in sweeps:
        if sweep not in names:
            have = ", ".join(sorted(names)) or "none"
            raise ValueError(f"sweep '{sweep}' not found under {results_dir} (sweeps: {have})")
    return [results_dir / s for s in sweeps]


def job_dirs(sweeps: list[Path]) -> list[Path]:
    """Every job directory ``<sweep>/<job>/`` of the sweeps, sorted (hidden ones are the
    harness's temporary directories)."""
    return [
        job
        for sweep in sweeps
        for job in sorted(sweep.iterdir())
        if job.is_dir() and not job.name.startswith(".")
    ]


def failed_jobs(sweep: Path) -> dict[str, str]:
    """Job name -> error of the sweep's ``failures.jsonl`` (the harness's log of failed
    jobs, one JSON object a line; the last line per job wins)."""
    path = sweep / results.FAILURES
    failed = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            entry = json.loads(line)
            failed[str(entry["job"])] = str(entry.get("error", "unknown error"))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return failed


def read_requests(job: Path) -> pa.Table:
    """The request table of a complete job directory (``results.complete_summary``), with
    every column the report reads.

    Raises:
        RunError: lacking a required column, without rows, or unreadable.
    """
    try:
        pf = pq.ParquetFile(job / results.REQUESTS)
        names = set(pf.schema_arrow.names)
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise RunError(f"{results.REQUESTS} lacks columns: {', '.join(missing)}")
        table = pf.read(columns=[c for c in COLUMNS if c in names])
    except (OSError, pa.ArrowException) as e:
        raise RunError(f"corrupt {results.REQUESTS}: {e}") from e
    if table.num_rows == 0:
        raise RunError(f"{results.REQUESTS} has no rows")
    for name, type_ in OPTIONAL.items():
        if name not in names:
            table = table.append_column(name, pa.nulls(table.num_rows, type_))
    return table


def target_role(summary: dict[str, Any]) -> str:
    """The target's key (``variant.target`` in the resolved config), else its model."""
    variant = (summary.get("config") or {}).get("variant") or {}
    return str(variant.get("target") or summary.get("target"))


def problem_set(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's problem set: ``limit`` (0: all problems) and ``dataset_digest`` (the
    harness's digest of the problems sent; "" when not recorded)."""
    limit = (summary.get("config") or {}).get("limit")
    return {"limit": int(limit or 0), "dataset_digest": str(summary.get("dataset_digest") or "")}


def _read_job(job: Path) -> tuple[pa.Table, dict[str, Any]] | Skipped:
    try:
        summary = results.complete_summary(job)
        table = read_requests(job)
    except (results.IncompleteRun, RunError) as e:
        return Skipped(str(job), str(e))
    role = pa.array([target_role(summary)] * table.num_rows, pa.string())
    table = table.append_column(ROLE, role)
    for name, value in problem_set(summary).items():
        table = table.append_column(name, pa.array([value] * table.num_rows))
    return table, summary


def run_row(summary: dict[str, Any], path: Path) -> dict[str, Any]:
    """One flat runs-table row: scalars as they are, the fields of the other :data:`NESTED`
    dicts prefixed with their key (``spec_accepted_per_pos`` stays a list), the config's
    ``max_tokens``, ``pair_window`` and SLO bounds (``slo_ttft_ms``, ...), and the draft's
    training (:data:`DRAFT_TRAINING`)."""
    row: dict[str, Any] = {k: v for k, v in summary.items() if k not in NESTED}
    for key in NESTED[1:]:
        for name, value in (summary.get(key) or {}).items():
            row[f"{key}_{name}"] = value
    row[ROLE] = target_role(summary)
    row |= problem_set(summary)
    config = summary.get("config") or {}
    row["max_tokens"] = config.get("max_tokens")
    row["pair_window"] = config.get("pair_window")
    slo = config.get("slo") or {}
    row |= {f"slo_{name}": slo.get(name) for name in metrics.SLO_BOUNDS}
    drafts = [
        m for key, m in (summary.get("models") or {}).items() if key.startswith("models.drafts.")
    ]
    training = (drafts[0].get("training") if drafts else None) or {}
    row |= {f"draft_{name}": training.get(name) for name in DRAFT_TRAINING}
    row["path"] = str(path)
    return row


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow to pandas; list columns stay Arrow-backed (``Series.list`` works on them)."""
    df = table.to_pandas(types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_list(t) else None)
    df["draft"] = df["draft"].fillna(NO_DRAFT)
    df["pairing"] = df["pairing"].fillna(SEQUENTIAL)
    df["backend"] = df["backend"].fillna(OFFLINE)
    df["request_rate"] = df["request_rate"].fillna(CLOSED_LOOP)
    df["k_schedule"] = df["k_schedule"].fillna(FIXED_K)
    df["synthetic_acceptance_length"] = (
        df["synthetic_acceptance_length"].astype(float).fillna(REAL_ACCEPTANCE)
    )
    df["instances"] = df["instances"].fillna(1).astype(int)
    df["instance"] = df["instance"].fillna(0).astype(int)
    df["correct"] = df["correct"].astype(float)
    return df


def _empty_requests() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in (*COLUMNS, ROLE, *PROBLEM_SET)})


def load(results_dir: str | Path, sweeps: list[str] | None = None, threads: int = 8) -> Results:
    """Load every run under ``results_dir`` (or only ``sweeps``) into tidy tables.

    Raises:
        ValueError: a named sweep does not exist.
    """
    sweeps_read = stored_sweeps(Path(results_dir), sweeps)
    jobs = job_dirs(sweeps_read)
    with ThreadPoolExecutor(threads) as pool:
        read = list(pool.map(_read_job, jobs))
    good = [(job, r) for job, r in zip(jobs, read, strict=True) if not isinstance(r, Skipped)]
    skipped = tuple(r for r in read if isinstance(r, Skipped))
    seen = {str(job) for job in jobs}
    skipped += tuple(
        Skipped(str(sweep / job), f"failed: {error}")
        for sweep in sweeps_read
        for job, error in failed_jobs(sweep).items()
        if str(sweep / job) not in seen
    )
    if not good:
        return Results(_empty_requests(), pd.DataFrame(), skipped)
    tables = [t for _, (t, _) in good]
    requests = _to_pandas(pa.concat_tables(tables, promote_options="permissive"))
    runs = pd.DataFrame([run_row(s, job) for job, (_, s) in good])
    runs["draft"] = runs["draft"].fillna(NO_DRAFT)
    for column, value in (("pairing", SEQUENTIAL), ("backend", OFFLINE),
                          ("request_rate", CLOSED_LOOP), ("k_schedule", FIXED_K),
                          ("synthetic_acceptance_length", REAL_ACCEPTANCE)):  # fmt: skip
        runs[column] = runs.get(column, pd.Series(index=runs.index, dtype=object)).fillna(value)
    runs["instances"] = runs.get("instances", pd.Series(1, index=runs.index)).fillna(1).astype(int)
    for field in provenance.LATER_FIELDS:  # runs recorded before the field existed
        column = f"hardware_{field}"
        recorded = runs.get(column, pd.Series(index=runs.index, dtype=object)).astype(object)
        runs[column] = recorded.fillna(provenance.UNKNOWN)
    return Results(requests, runs, skipped)
