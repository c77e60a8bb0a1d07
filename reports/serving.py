"""Speculation under load: the server backend's groups by request rate, and the load at
which speculation stops paying.

A group's speedup at a request rate pairs it with the K = 0 group at the same rate
(``reports.aggregate``); the crossover of a speculative configuration reads those
speedups along its rates (closed-loop groups, rate 0, are not on that axis).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.load import CLOSED_LOOP

CONFIGURATION = ["sweep_id", "variant", "dataset", "k", "concurrency"]


def by_rate(table: pd.DataFrame) -> pd.DataFrame:
    """The server backend's groups, by configuration and request rate."""
    if table.empty:
        return table
    rows = table[table["backend"] == "server"]
    return rows.sort_values([*CONFIGURATION[:3], "k", "request_rate"])


def crossovers(table: pd.DataFrame) -> pd.DataFrame:
    """Per speculative configuration measured at two or more open-loop rates: the highest
    rate whose TPOT speedup's 95% CI lies above 1 (``helps_up_to``), the lowest whose
    speedup is below 1 (``first_below_1``: the crossover) and the lowest whose CI lies
    below 1 (``hurts_from``); NaN where no rate qualifies."""
    columns = [*CONFIGURATION, "rates", "helps_up_to", "first_below_1", "hurts_from"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    rows = table[(table["backend"] == "server") & (table["k"] > 0)]
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
