"""The drift sentinel: its thresholds, the drifts it reads and the flag.

A run's reference (``harness.sweep.job.Reference``, the same fixed request timed at the
job's start and end) that moved more than its pairing's :func:`threshold` within the run
flags the run: :data:`DRIFT` for a sequential run, whose speedup divides timings minutes
apart; :data:`DRIFT_INTERLEAVED` for an interleaved one, whose pairs cancel a smaller drift
(the evidence: docs/results/sentinel-evidence). ``python -m study`` re-runs flagged runs;
the report lists every run flagged and what became of it (:func:`outcomes`) and widens
their verdicts (docs/METRICS.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

DRIFT = 0.05  # a sequential run's move within it, or a reference's across runs, flagged above
# an interleaved run's move within it flagged above: below, its paired speedup's halves moved
# beyond its interval no more often than at drifts under DRIFT (docs/METRICS.md)
DRIFT_INTERLEAVED = 0.20
INTERLEAVED = "interleaved"  # the pairing whose runs DRIFT_INTERLEAVED judges
FLAGGED = ("sweep_id", "run_id", "reference_start_s", "reference_end_s", "drift")
OUTCOMES = ("sweep_id", "run_id", "drifts", "reruns", "flagged")


def drift(reference: Mapping[str, Any] | None) -> float | None:
    """``end_s / start_s - 1`` of a summary's ``reference``; None without a whole one."""
    if not reference or not reference.get("start_s") or reference.get("end_s") is None:
        return None
    return float(reference["end_s"]) / float(reference["start_s"]) - 1


def threshold(pairing: str | None = None) -> float:
    """The largest move a run of ``pairing`` may show: :data:`DRIFT_INTERLEAVED` for an
    interleaved run, else :data:`DRIFT` (None: a reading across runs, shift or spread)."""
    return DRIFT_INTERLEAVED if pairing == INTERLEAVED else DRIFT


def is_flagged(value: float | None, pairing: str | None = None) -> bool:
    """True when a drift of a run of ``pairing`` (or, None, a shift or spread of references
    across runs) exceeds its :func:`threshold` in size."""
    return value is not None and bool(np.isfinite(value)) and abs(value) > threshold(pairing)


def _references(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each loaded run's reference seconds per unit at its start and its end (NaN: none)."""
    nan = pd.Series(np.nan, index=runs.index)
    return runs.get("reference_start_s", nan).astype(float), runs.get(
        "reference_end_s", nan
    ).astype(float)


def flagged(runs: pd.DataFrame) -> pd.DataFrame:
    """The loaded runs (``reports.load``'s runs table) the sentinel flags (each by its
    pairing's :func:`threshold`), by sweep and run: :data:`FLAGGED` columns."""
    if runs.empty or "reference_start_s" not in runs:
        return pd.DataFrame(columns=list(FLAGGED))
    start, end = _references(runs)
    out = runs[["sweep_id", "run_id"]].assign(
        reference_start_s=start, reference_end_s=end, drift=end / start - 1
    )
    out = out[[is_flagged(d, p) for d, p in zip(out["drift"], runs["pairing"], strict=True)]]
    return out.sort_values(["sweep_id", "run_id"]).reset_index(drop=True)


def by_group(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per group of ``keys``, each the largest in size over the group's runs:
    ``reference_drift``, the reference's move within a run (end / start - 1);
    ``reference_shift``, a run's reference over the median of its sweep's references on the
    same plain target (runs timed on a plain engine: K = 0 and interleaved ones) - 1, the
    machine's speed then against the sweep's; and ``reference_spread``, max / min - 1 of
    the group's runs' references (repeats)."""
    keys = list(keys)
    start, end = _references(runs)
    plain = start.where(runs.get("reference_k", pd.Series(np.nan, index=runs.index)) == 0)
    median = plain.groupby([runs["sweep_id"], runs["target"]]).transform("median")
    frame = runs[keys].assign(
        reference_drift=end / start - 1, reference_shift=plain / median - 1, _start=start
    )
    grouped = frame.groupby(keys, sort=True, dropna=False)
    out = grouped["_start"].agg(lambda x: x.max() / x.min() - 1).rename("reference_spread")
    parts = [out.reset_index()]
    for col in ("reference_drift", "reference_shift"):
        largest = frame.assign(_abs=frame[col].abs()).sort_values(
            "_abs", ascending=False, na_position="last", kind="stable"
        )
        parts.append(largest.drop_duplicates(keys)[[*keys, col]])
    return functools.reduce(lambda a, b: a.merge(b, on=keys), parts)


def outcomes(now_flagged: pd.DataFrame, record: Mapping[str, Any] | None) -> pd.DataFrame:
    """Every run flagged at any point and what became of it: :data:`OUTCOMES` columns,
    ``drifts`` the drift of each attempt (the kept run's last), ``reruns`` how many times
    it was run again, ``flagged`` whether the kept run is among ``now_flagged`` (the runs
    :func:`flagged` flags by today's rule; a study made under an earlier one may list runs
    it no longer flags). ``record`` is a study's ``sentinel`` record (``study.json``: its
    re-runs); without one, runs flagged now were not re-run."""
    now = {(r["sweep_id"], r["run_id"]): r["drift"] for _, r in now_flagged.iterrows()}
    rows = {
        (r["sweep"], r["job"]): (
            list(r["drifts"]),
            len(r["drifts"]) - 1,
            (r["sweep"], r["job"]) in now,
        )
        for r in (record or {}).get("reruns", ())
    }
    for key, drift in now.items():
        rows.setdefault(key, ([drift], 0, True))
    return pd.DataFrame(
        [(*key, *value) for key, value in sorted(rows.items())], columns=list(OUTCOMES)
    )
