"""The analytical model fitted to measured runs: a, c, predicted and measured best K.

For each draft configuration (a group of :data:`reports.aggregate.GROUP` without K):

- a: per-token acceptance, pooled over every K of the configuration, from per-request
  per-position counts (the MLE of :func:`reports.theory.alpha_mle`), with a bootstrap CI;
  ``alpha_vllm`` is the same estimate from vLLM's global per-position counters in the
  run summaries, as a cross-check.
- c: the effective draft/target cost ratio that makes the model reproduce the TPOT
  speedup measured at the smallest K (:func:`reports.theory.cost_ratio_from_speedup`);
  its interval maps the speedup's CI at that fixed a. It absorbs whatever the model
  leaves out: verification dearer than one target step, scheduling, KV-cache rollback.
- the best K predicted for (a, c), and the best K measured (K = 0 counts, speedup 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import aggregate, bootstrap, theory

CONFIG = tuple(c for c in aggregate.GROUP if c != "k")
ALPHA = next(r for r in aggregate.RATIOS if r.name == "alpha")
COLUMNS = (
    *CONFIG, "ks", "alpha", "alpha_lo", "alpha_hi", "alpha_vllm", "c", "c_lo", "c_hi",
    "c_from_k", "best_k_predicted", "speedup_predicted", "best_k_measured", "speedup_measured",
)  # fmt: skip


def _alpha_vllm(runs: pd.DataFrame) -> float:
    """Pooled a from the summaries' per-position counters (NaN when absent)."""
    if "spec_accepted_per_pos" not in runs or runs["spec_accepted_per_pos"].isna().all():
        return float("nan")
    spec = runs.dropna(subset=["spec_accepted_per_pos", "spec_num_drafts"])
    accepted = sum(float(np.sum(p)) for p in spec["spec_accepted_per_pos"])
    attempts = sum(
        theory.position_attempts(p, n)
        for p, n in zip(spec["spec_accepted_per_pos"], spec["spec_num_drafts"], strict=True)
    )
    return accepted / attempts if attempts else float("nan")


def fit(
    table: pd.DataFrame,
    requests: pd.DataFrame,
    runs: pd.DataFrame,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per draft configuration with a speculative (K > 0) group in ``table``."""
    spec = table[(table["k"] > 0) & (table["draft"] != "none")]
    if spec.empty:
        return pd.DataFrame(columns=COLUMNS)
    by_config = aggregate.blocks(aggregate.with_sums(requests[requests["k"] > 0]), CONFIG)
    rows = []
    for key, groups in spec.groupby(list(CONFIG), sort=True, dropna=False):
        labels = dict(zip(CONFIG, key, strict=True))
        point, lo, hi = bootstrap.ratio(*by_config[key].arrays((ALPHA,)), n_boot, seed)
        a, a_lo, a_hi = float(point[0]), float(lo[0]), float(hi[0])
        first = groups.sort_values("k").iloc[0]
        c = theory.cost_ratio_from_speedup(
            a, first["k"], first[["speedup_tpot", "speedup_tpot_hi", "speedup_tpot_lo"]]
        )
        k_best = theory.best_k(a, max(c[0], 0.0)) if np.isfinite(c[0]) else -1
        measured = groups[["k", "speedup_tpot"]].dropna()
        top = measured.loc[measured["speedup_tpot"].idxmax()] if len(measured) else None
        beats_plain = top is not None and top["speedup_tpot"] > 1.0
        rows.append(
            {
                **labels,
                "ks": ",".join(str(k) for k in sorted(groups["k"])),
                "alpha": a,
                "alpha_lo": a_lo,
                "alpha_hi": a_hi,
                "alpha_vllm": _alpha_vllm(aggregate.select(runs, labels, CONFIG)),
                "c": c[0],
                "c_lo": c[1],
                "c_hi": c[2],
                "c_from_k": int(first["k"]),
                "best_k_predicted": k_best,
                "speedup_predicted": theory.predicted_speedup(a, max(k_best, 0), max(c[0], 0.0)),
                "best_k_measured": int(top["k"]) if beats_plain else 0,
                "speedup_measured": float(top["speedup_tpot"]) if beats_plain else 1.0,
            }
        )
    return aggregate.sort_groups(pd.DataFrame(rows, columns=COLUMNS))
