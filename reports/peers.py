"""draftbench beside its peers: the rounds ``bench/peers.py --csv`` writes (each round's
figure of draftbench and of its peer, measured one after the other) and the agreement
table a study's REPORT.md shows from them (docs/PEERS.md says what each comparison runs)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from reports import markdown

ROUNDS = "peers.csv"  # a study's raw/peers.csv
TABLE = "agreement.csv"  # the table REPORT.md shows, beside it
LEVEL = 0.95  # of the ratio's interval over the rounds
LATENCY_BOUND = 0.03  # |draftbench / vllm bench latency - 1|, one request at a time
SERVE_BOUND = 0.05  # |draftbench / vllm bench serve - 1|, TPOT and ITL at each rate
KEYS = ["comparison", "model", "k", "load", "unit"]


@dataclass(frozen=True)
class Round:
    """One round of one comparison: draftbench's figure beside its peer's."""

    comparison: str  # e.g. "vllm bench latency"
    model: str
    k: int
    load: str  # e.g. "batch 1"
    round: int
    draftbench: float
    peer: float
    unit: str
    bound: float | None  # they agree when |ratio - 1| <= bound; None: a speed ratio


def write_rounds(rounds: Iterable[Round], path: Path) -> None:
    """``rounds`` as a CSV table at ``path``."""
    columns = [f.name for f in fields(Round)]
    pd.DataFrame([asdict(r) for r in rounds], columns=columns).to_csv(path, index=False)


def agreement(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per comparison (model, K, load): its rounds, each side's mean, the ratio
    draftbench / peer (geometric mean of the rounds' ratios) with its t interval over
    the rounds, the bound and whether the ratio is within it."""
    rows = []
    for key, group in rounds.groupby(KEYS, sort=False):
        logs = np.log(group["draftbench"].to_numpy(float) / group["peer"].to_numpy(float))
        mean = logs.mean()
        half = stats.sem(logs) * stats.t.ppf((1 + LEVEL) / 2, len(logs) - 1) if len(logs) > 1 else np.nan  # fmt: skip
        bound = group["bound"].iloc[0]
        ratio = float(np.exp(mean))
        rows.append(
            {**dict(zip(KEYS, key, strict=True)), "rounds": len(group),
             "draftbench": group["draftbench"].mean(), "peer": group["peer"].mean(),
             "ratio": ratio, "ratio_lo": float(np.exp(mean - half)),
             "ratio_hi": float(np.exp(mean + half)), "bound": bound,
             "agrees": None if pd.isna(bound) else bool(abs(ratio - 1) <= bound)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def section(table: pd.DataFrame) -> list[str]:
    """REPORT.md's lines for the agreement ``table``."""
    agrees = {True: "yes", False: "**no**", None: "(speed ratio)"}
    columns = [
        ("comparison", lambda r: r["comparison"]),
        ("model", lambda r: f"`{r['model']}`"),
        ("K", lambda r: r["k"]),
        ("load", lambda r: r["load"]),
        ("rounds", lambda r: r["rounds"]),
        ("draftbench", lambda r: f"{markdown.num(r['draftbench'], 2)} {r['unit']}"),
        ("peer", lambda r: f"{markdown.num(r['peer'], 2)} {r['unit']}"),
        ("draftbench / peer", lambda r: f"{markdown.num(r['ratio'], 3)} "
         f"[{markdown.num(r['ratio_lo'], 3)}, {markdown.num(r['ratio_hi'], 3)}]"),
        ("bound", lambda r: "" if pd.isna(r["bound"]) else f"±{r['bound']:.0%}"),
        ("agrees", lambda r: agrees[None if pd.isna(r["bound"]) else bool(r["agrees"])]),
    ]  # fmt: skip
    return [
        "## draftbench beside its peers",
        "",
        "Each comparison's rounds alternate the two sides (each side first in half of them). "
        "The ratio is the geometric mean of the rounds' draftbench / peer ratios with its "
        f"{LEVEL:.0%} t interval over the rounds. The two sides agree when the ratio is "
        "within the bound of 1.",
        "",
        markdown.table(table, columns),
        "",
    ]
