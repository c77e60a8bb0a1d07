"""The what-if surface: runs whose drafts were accepted at random to a set mean acceptance
length (``spec.synthetic_acceptance_length``), their measured speedup beside the cost
model's prediction. They are kept out of every other table: their outputs are not the
target's, so accuracy, losslessness and the verdicts do not apply."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import aggregate, bootstrap, fit, load

SYNTHETIC = "synthetic_acceptance_length"
WITHIN = 0.10  # a prediction "hits" when measured / predicted is within 10% of 1
COLUMNS = (
    "sweep_id", "variant", "draft", "dataset", "concurrency", "k", SYNTHETIC,
    "mean_acceptance_length", "speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi",
    "speedup_tpot_predicted", "c", "t_step_s", "t_target_s",
)  # fmt: skip


def split(results: load.Results) -> tuple[load.Results, load.Results]:
    """``results`` as (runs at their speculator's own acceptance, what-if runs)."""

    def part(synthetic: bool) -> load.Results:
        def rows(df: pd.DataFrame) -> pd.DataFrame:
            if df.empty or SYNTHETIC not in df:
                return df if not synthetic else df.iloc[0:0]
            return df[(df[SYNTHETIC] != load.REAL_ACCEPTANCE) == synthetic]

        return load.Results(rows(results.requests), rows(results.runs), results.skipped)

    return part(False), part(True)


def surface(results: load.Results, n_boot: int = bootstrap.N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per what-if group: its set and measured acceptance length, the measured
    TPOT speedup (95% CI) and the cost model's prediction from the measured acceptance and
    the calibrated step costs, with ``measured_over_predicted``."""
    if results.runs.empty:
        return pd.DataFrame(columns=[*COLUMNS, "measured_over_predicted"])
    req, runs = results.requests, results.runs
    table = aggregate.aggregate(req, runs, n_boot, seed)
    table = fit.with_predictions(table, aggregate.positions(req, n_boot, seed), runs, req)
    out = table[list(COLUMNS)].sort_values(["sweep_id", "variant", "dataset", "k", SYNTHETIC])
    ratio = out["speedup_tpot"] / out["speedup_tpot_predicted"]
    return out.assign(measured_over_predicted=ratio).reset_index(drop=True)


def hit_rate(surface: pd.DataFrame) -> tuple[int, int]:
    """(points whose measured / predicted is within :data:`WITHIN` of 1, points predicted)."""
    ratio = surface["measured_over_predicted"].dropna()
    return int((np.abs(ratio - 1) <= WITHIN).sum()), len(ratio)


def needed(surface: pd.DataFrame, speedup: float = 2.0) -> pd.DataFrame:
    """Per (series, dataset, concurrency, K): the mean acceptance length at which the
    measured TPOT speedup reaches ``speedup``, linear between the measured points (NaN
    when no point reaches it), and the highest speedup measured."""
    rows = []
    keys = ["series", "dataset", "concurrency", "k"]
    for key, g in surface.dropna(subset=["speedup_tpot"]).groupby(keys, sort=True):
        g = g.sort_values("mean_acceptance_length")
        x, y = g["mean_acceptance_length"].to_numpy(float), g["speedup_tpot"].to_numpy(float)
        above = np.flatnonzero(y >= speedup)
        if not len(above):
            length = np.nan
        elif above[0] == 0:
            length = x[0]
        else:
            i = above[0]
            length = x[i - 1] + (speedup - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1])
        rows.append(dict(zip(keys, key, strict=True), needed=length, best=y.max()))
    return pd.DataFrame(rows, columns=[*keys, "needed", "best"])
