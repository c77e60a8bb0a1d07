"""The drift sentinel's flag per run: a run whose reference (``harness.sweep.job.Reference``,
the same fixed request timed at the job's start and end) moved more than
:data:`reports.aggregate.DRIFT` within the run. ``python -m study`` re-runs flagged runs;
the report lists the ones still flagged and widens their verdicts (docs/METRICS.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from reports.aggregate import DRIFT

FLAGGED = ("sweep_id", "run_id", "reference_start_s", "reference_end_s", "drift")


def drift(reference: Mapping[str, Any] | None) -> float | None:
    """``end_s / start_s - 1`` of a summary's ``reference``; None without a whole one."""
    if not reference or not reference.get("start_s") or reference.get("end_s") is None:
        return None
    return float(reference["end_s"]) / float(reference["start_s"]) - 1


def is_flagged(value: float | None) -> bool:
    """True when a run's drift exceeds :data:`DRIFT` in size."""
    return value is not None and bool(np.isfinite(value)) and abs(value) > DRIFT


def flagged(runs: pd.DataFrame) -> pd.DataFrame:
    """The loaded runs (``reports.load``'s runs table) the sentinel flags, by sweep and run:
    :data:`FLAGGED` columns."""
    if runs.empty or "reference_start_s" not in runs:
        return pd.DataFrame(columns=list(FLAGGED))
    start = runs["reference_start_s"].astype(float)
    end = runs.get("reference_end_s", pd.Series(np.nan, index=runs.index)).astype(float)
    out = runs[["sweep_id", "run_id"]].assign(
        reference_start_s=start, reference_end_s=end, drift=end / start - 1
    )
    out = out[[is_flagged(d) for d in out["drift"]]]
    return out.sort_values(["sweep_id", "run_id"]).reset_index(drop=True)
