"""Speculation under load: the server backend's groups by request rate, the load at which
speculation stops paying, and a K schedule by batch size to deploy.

A group's speedup at a request rate pairs it with the K = 0 group at the same rate
(``reports.aggregate``); the crossover of a speculative configuration reads those
speedups along its rates (closed-loop groups, rate 0, are not on that axis). The K
schedule reads closed-loop groups at several concurrencies: the cost model's predicted
speedup per K at each (``reports.fit``), the measured one beside it, and the schedule's
own run when it has one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness import schedule
from harness.backends import streamed
from reports.load import CLOSED_LOOP, FIXED_K

CONFIGURATION = ["sweep_id", "variant", "dataset", "k", "concurrency"]


def by_rate(table: pd.DataFrame) -> pd.DataFrame:
    """The server backend's groups, by configuration and request rate."""
    if table.empty:
        return table
    rows = table[table["backend"].map(streamed)]
    return rows.sort_values([*CONFIGURATION[:3], "k", "request_rate"])


def crossovers(table: pd.DataFrame) -> pd.DataFrame:
    """Per speculative configuration measured at two or more open-loop rates: the highest
    rate whose TPOT speedup's 95% CI lies above 1 (``helps_up_to``), the lowest whose
    speedup is below 1 (``first_below_1``: the crossover) and the lowest whose CI lies
    below 1 (``hurts_from``); NaN where no rate qualifies."""
    columns = [*CONFIGURATION, "rates", "helps_up_to", "first_below_1", "hurts_from"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    rows = table[table["backend"].map(streamed) & (table["k"] > 0)]
    rows = rows[(rows["request_rate"] != CLOSED_LOOP) & rows["speedup_tpot"].notna()]
    out = []
    for key, g in rows.groupby(CONFIGURATION, sort=True):
        if g["request_rate"].nunique() < 2:
            continue
        g = g.sort_values("request_rate")
        rate = g["request_rate"].to_numpy(float)

        def lowest(mask: pd.Series, rate: np.ndarray = rate) -> float:
            return float(rate[mask.to_numpy()].min()) if mask.any() else np.nan

        helps = g["speedup_tpot_lo"] > 1
        out.append({
            **dict(zip(CONFIGURATION, key, strict=True)),
            "rates": ", ".join(f"{r:g}" for r in rate),
            "helps_up_to": float(rate[helps.to_numpy()].max()) if helps.any() else np.nan,
            "first_below_1": lowest(g["speedup_tpot"] < 1),
            "hurts_from": lowest(g["speedup_tpot_hi"] < 1),
        })  # fmt: skip
    return pd.DataFrame(out, columns=columns)


def _off(at: pd.DataFrame) -> float | None:
    """A concurrency's speedup at K = 0 of a schedule: the speculator's calibrated speed with
    speculation off over the target's (``speedup_off_predicted``, both calibrated on the
    same fixed requests); None when uncalibrated."""
    off = at.get("speedup_off_predicted", pd.Series(dtype=float)).dropna()
    return float(off.iloc[0]) if len(off) else None


def _best_k(at: pd.DataFrame, column: str) -> int:
    """The K of the highest ``column`` among a concurrency's K > 0 rows; 0 when none
    exceeds K = 0's speedup (:func:`_off`, else 1: the target alone) or none is known."""
    known = at.dropna(subset=[column])
    off = _off(at)
    if known.empty or known[column].max() <= (1.0 if off is None else off):
        return 0
    return int(known.loc[known[column].idxmax(), "k"])


SCHEDULED = ["sweep_id", "backend", "variant", "dataset"]


def _off_text(off: dict[int, float | None]) -> str:
    """K = 0's speedup per concurrency; "target alone" where it was not calibrated."""
    if all(v is None for v in off.values()):
        return "target alone"
    return ", ".join(f"{c}: {'target alone' if v is None else f'{v:.2f}x'}" for c, v in off.items())


def k_schedules(table: pd.DataFrame) -> pd.DataFrame:
    """Per speculator configuration run closed loop at fixed Ks and two or more
    concurrencies: the K per batch size the cost model predicts fastest (K = 0 where no
    K beats speculation off, :func:`_off`), as vLLM's
    ``num_speculative_tokens_per_batch_size``, the best K measured at each concurrency,
    K = 0's speedup at each (``off``; "target alone" where uncalibrated) and the overrides
    that run the schedule."""
    columns = [*SCHEDULED, "concurrencies", "predicted", "measured", "off", "schedule",
               "overrides"]  # fmt: skip
    if table.empty:
        return pd.DataFrame(columns=columns)
    fixed = table[(table["request_rate"] == CLOSED_LOOP) & (table["k_schedule"] == FIXED_K)]
    out = []
    for key, g in fixed[fixed["k"] > 0].groupby(SCHEDULED, sort=True):
        levels = sorted(int(c) for c in g["concurrency"].unique())
        if len(levels) < 2:
            continue
        by_level = {int(c): at for c, at in g.groupby("concurrency")}
        predicted = {c: _best_k(by_level[c], "speedup_tpot_predicted") for c in levels}
        measured = {c: _best_k(by_level[c], "speedup_tpot") for c in levels}
        ranges = schedule.from_levels(levels, predicted)
        top = int(g["k"].max())
        shown = str(ranges).replace(" ", "")
        out.append({
            **dict(zip(SCHEDULED, key, strict=True)),
            "concurrencies": ", ".join(map(str, levels)),
            "predicted": ", ".join(f"{c}: K={k}" for c, k in predicted.items()),
            "measured": ", ".join(f"{c}: K={k}" for c, k in measured.items()),
            "off": _off_text({c: _off(by_level[c]) for c in levels}),
            "schedule": shown,
            "overrides": f"variant={key[2]} dataset={key[3]} spec.k={top} spec.k_schedule={shown}",
        })  # fmt: skip
    return pd.DataFrame(out, columns=columns)


def schedule_checks(table: pd.DataFrame) -> pd.DataFrame:
    """Each K schedule's measured run beside the best fixed K measured at the same
    concurrency (closed loop): the schedule's TPOT speedup and the fixed K's, with CIs."""
    speedup = ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]
    own = [*SCHEDULED, "concurrency", "k_schedule", *speedup]
    columns = [*own, "best_fixed_k", *(f"fixed_{s}" for s in speedup)]
    if table.empty:
        return pd.DataFrame(columns=columns)
    closed = table[(table["request_rate"] == CLOSED_LOOP) & (table["k"] > 0)]
    runs = closed[closed["k_schedule"] != FIXED_K]
    fixed = closed[closed["k_schedule"] == FIXED_K].dropna(subset=["speedup_tpot"])
    out = []
    for _, row in runs.iterrows():
        same = fixed
        for c in (*SCHEDULED, "concurrency"):
            same = same[same[c] == row[c]]
        best = same.loc[same["speedup_tpot"].idxmax()] if not same.empty else None
        out.append({
            **{c: row[c] for c in own},
            "best_fixed_k": np.nan if best is None else int(best["k"]),
            **{f"fixed_{s}": np.nan if best is None else best[s] for s in speedup},
        })  # fmt: skip
    return pd.DataFrame(out, columns=columns).sort_values([*SCHEDULED, "concurrency"])
