"""Spec-Bench's two headline numbers (Xia et al. 2024, ``evaluation/speed.py``) from our
request records, per :data:`reports.aggregate.GROUP`, for readers of its leaderboard.

- MAT (mean accepted tokens) = tokens emitted per target forward pass, pooled over every
  decoding step of every question, the bonus token included, so plain decoding scores
  1.00. Our records give output tokens / (verify steps + the prefill step) at K > 0.
- speedup = mean over questions of tokens/s (output tokens / e2e) / the same mean over the
  K = 0 baseline's questions (:data:`reports.aggregate.BASELINE`, seeds pooled).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.aggregate import BASELINE, GROUP


def mean_accepted_tokens(requests: pd.DataFrame) -> pd.Series:
    """Spec-Bench's MAT per group (index :data:`GROUP`); 1.0 at K = 0."""
    forwards = np.where(
        requests["k"] > 0, requests["num_spec_steps"].fillna(0) + 1, requests["output_tokens"]
    )
    sums = (
        requests.assign(_forwards=forwards)
        .groupby(list(GROUP), dropna=False)[["output_tokens", "_forwards"]]
        .sum()
    )
    return (sums["output_tokens"] / sums["_forwards"]).rename("spec_bench_mat")


def speedup(requests: pd.DataFrame) -> pd.Series:
    """Spec-Bench's speedup per group (index :data:`GROUP`): mean request tokens/s over the
    K = 0 baseline's mean request tokens/s; NaN without a baseline."""
    speeds = (
        requests.assign(_speed=requests["output_tokens"] / requests["e2e_s"])
        .groupby(list(GROUP), dropna=False)["_speed"]
        .agg(["sum", "count"])
        .reset_index()
    )
    base = (
        speeds[speeds["k"] == 0]
        .groupby(list(BASELINE), dropna=False)[["sum", "count"]]
        .sum()
        .reset_index()
    )
    both = speeds.merge(base, on=list(BASELINE), how="left", suffixes=("", "_base"))
    ratio = (both["sum"] / both["count"]) / (both["sum_base"] / both["count_base"])
    return pd.Series(
        ratio.to_numpy(),
        index=pd.MultiIndex.from_frame(both[list(GROUP)]),
        name="spec_bench_speedup",
    )


def spec_bench(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per group: :data:`GROUP`, ``spec_bench_mat`` and ``spec_bench_speedup``."""
    if requests.empty:
        return pd.DataFrame(columns=[*GROUP, "spec_bench_mat", "spec_bench_speedup"])
    return pd.concat([mean_accepted_tokens(requests), speedup(requests)], axis=1).reset_index()
