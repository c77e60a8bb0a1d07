"""Experiment tracking (``tracking=mlflow``): each finished run logged to MLflow, with the
resolved config as params, its headline numbers as metrics and its provenance as tags,
into the sweep's experiment; reports log REPORT.md and figures to a sweep-level run.

Logging never changes a result or fails a job: a tracker that is missing or down costs
one warning line.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import metrics as measures
from harness.errors import first_line
from harness.records import RequestRecord, RunSummary

PACKAGE = "mlflow"  # the client tracking=mlflow logs with (make install-tracking)
DB = "mlflow.db"  # the default store, under results_dir
SQLITE = "sqlite:///"
ARTIFACTS = (
    ".mlflow-artifacts"  # beside a SQLite store: <dir>/<this>/<experiment> (hidden: no sweep)
)
SWEEP_RUN = "sweep report"  # the run that holds a sweep's report
# a tracking server that is down costs seconds, not MLflow's minutes of retries
PATIENCE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
MAX_PARAM = 6000  # MLflow's longest param value; a longer one (a custom prompt) is cut


def installed() -> bool:
    """Whether MLflow's client is importable (looked up, not imported: seconds)."""
    return importlib.util.find_spec(PACKAGE) is not None


def uri(tracking_uri: str | None, results_dir: str | Path) -> str:
    """``tracking.uri``, else (None or empty) a SQLite file under ``results_dir``."""
    return tracking_uri or f"{SQLITE}{Path(results_dir).resolve() / DB}"


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b": "value"} (MLflow params are flat strings, at most
    :data:`MAX_PARAM` characters)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = str(value)[:MAX_PARAM]
    return flat


def metrics(summary: RunSummary, records: Sequence[RequestRecord]) -> dict[str, float]:
    """A run's headline numbers: accuracy, mean TPOT, throughput, acceptance summed over
    its requests (speculative), the paired TPOT speedup (interleaved: the pairs' TPOT over
    the run's, on the requests that have both)."""
    out = {"accuracy": sum(r.correct for r in records) / len(records) if records else math.nan,
           "output_tokens_per_s": summary.output_tokens_per_s, "wall_s": summary.wall_s}  # fmt: skip
    tpots = [r.tpot_s for r in records if r.tpot_s is not None]
    if tpots:
        out["tpot_ms"] = 1000 * sum(tpots) / len(tpots)
    pairs = [(r.pair_tpot_s, r.tpot_s) for r in records if r.pair_tpot_s and r.tpot_s]
    if pairs:
        out["speedup_tpot"] = sum(p for p, _ in pairs) / sum(t for _, t in pairs)
    counts = [r.spec_counts for r in records if r.spec_counts is not None]
    if counts:
        spec = measures.total_counts(counts).to_row()
        for key in ("acceptance_rate", "mean_acceptance_length"):
            if spec.get(key) is not None:
                out[key] = float(spec[key])
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


@contextmanager
def _tracker(store: str, experiment: str, what: str) -> Iterator[Any]:
    """MLflow pointed at ``store`` and ``experiment``, or None after one warning line. In a
    SQLite store the experiment keeps its artifacts beside the database (MLflow's default
    is ``./mlruns`` under whatever directory the process runs in)."""
    for name, value in PATIENCE.items():
        os.environ.setdefault(name, value)
    logging.getLogger("mlflow").setLevel(logging.ERROR)  # its failures are our one line
    try:
        import mlflow

        mlflow.set_tracking_uri(store)
        if store.startswith(SQLITE) and mlflow.get_experiment_by_name(experiment) is None:
            artifacts = Path(store.removeprefix(SQLITE)).parent / ARTIFACTS / experiment
            mlflow.create_experiment(experiment, artifact_location=artifacts.as_uri())
        mlflow.set_experiment(experiment)
    except Exception as exc:  # a tracker never fails a job
        _warn(what, store, exc)
        yield None
        return
    try:
        yield mlflow
    except Exception as exc:
        _warn(what, store, exc)


def log_run(cfg: Any, summary: RunSummary, records: Sequence[RequestRecord]) -> None:
    """Log a finished run when ``tracking=mlflow``."""
    if cfg.tracking.name != "mlflow":
        return
    store = uri(cfg.tracking.uri, cfg.results_dir)
    with _tracker(store, cfg.sweep, summary.job.run_id) as mlflow:
        if mlflow is None:
            return
        tags = {"config_hash": summary.config_hash, "pairing": summary.job.pairing,
                **flatten({"run_key": summary.run_key, "git": summary.git,
                           "versions": summary.versions, "hardware": summary.hardware})}  # fmt: skip
        with mlflow.start_run(run_name=summary.job.run_id, tags=tags):
            mlflow.log_params(flatten(summary.config))
            mlflow.log_metrics(metrics(summary, records))


def log_report(
    tracking_uri: str | None, results_dir: Path, sweeps: Sequence[str], report: Path
) -> None:
    """Log ``report`` (REPORT.md) and its figures to each sweep's ``sweep report`` run (one
    per sweep, replaced at each report)."""
    store = uri(tracking_uri, results_dir)
    for sweep in sweeps:
        with _tracker(store, sweep, f"the report of {sweep}") as mlflow:
            if mlflow is None:
                continue
            found = mlflow.search_runs(
                filter_string=f"attributes.run_name = '{SWEEP_RUN}'", output_format="list"
            )
            with mlflow.start_run(run_id=found[0].info.run_id if found else None,
                                  run_name=SWEEP_RUN):  # fmt: skip
                mlflow.log_artifact(str(report))
                figures = report.parent / "figures"
                if figures.is_dir():
                    mlflow.log_artifacts(str(figures), artifact_path="figures")


def _warn(what: str, store: str, exc: BaseException) -> None:
    print(f"warning: tracking: {what} not logged to {store}: {first_line(exc)}", file=sys.stderr)
