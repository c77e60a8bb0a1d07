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
    """``rounds`` as a CSV table at ``path`` (its folder made if missing)."""
    columns = [f.name for f in fields(Round)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([asdict(r) for r in rounds], columns=columns).to_csv(path, index=False)


def agreement(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per comparison (model, K, load): its rounds with a figure on both sides (a
    side reading 0 measured nothing), each side's mean over them, the ratio draftbench /
    peer (geometric mean of the rounds' ratios) with its t interval over the rounds, the
    bound and the verdict (:func:`verdict`)."""
    rows = []
    for key, group in rounds.groupby(KEYS, sort=False):
        group = group[(group["draftbench"] > 0) & (group["peer"] > 0)]
        logs = np.log(group["draftbench"].to_numpy(float) / group["peer"].to_numpy(float))
        mean = logs.mean() if len(logs) else np.nan
        half = stats.sem(logs) * stats.t.ppf((1 + LEVEL) / 2, len(logs) - 1) if len(logs) > 1 else np.nan  # fmt: skip
        bound = group["bound"].iloc[0] if len(group) else np.nan
        ratio, lo, hi = (float(np.exp(x)) for x in (mean, mean - half, mean + half))
        rows.append(
            {**dict(zip(KEYS, key, strict=True)), "rounds": len(group),
             "draftbench": group["draftbench"].mean(), "peer": group["peer"].mean(),
             "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi, "bound": bound,
             "agrees": verdict(ratio, lo, hi, bound)}
        )  # fmt: skip
    columns = [*KEYS, "rounds", "draftbench", "peer", "ratio", "ratio_lo", "ratio_hi", "bound",
               "agrees"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def verdict(ratio: float, lo: float, hi: float, bound: float) -> str:
    """``yes``: the whole interval within ``bound`` of 1; ``ratio only``: the ratio within
    it, the interval not; ``no``: the ratio outside it; empty for a speed ratio (no bound)
    or no ratio."""
    if pd.isna(bound) or pd.isna(ratio):
        return ""
    if abs(ratio - 1) > bound:
        return "no"
    return "yes" if 1 - bound <= lo and hi <= 1 + bound else "ratio only"


def section(table: pd.DataFrame) -> list[str]:
    """REPORT.md's lines for the agreement ``table``."""
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
        ("agrees", lambda r: "(speed ratio)" if pd.isna(r["bound"]) else _bold_no(r["agrees"])),
    ]  # fmt: skip
    return [
        "## draftbench beside its peers",
        "",
        "Each comparison's rounds alternate the two sides (each side first in half of them); "
        "each side's column is its mean over the rounds. The ratio is the geometric mean of "
        f"the rounds' draftbench / peer ratios with its {LEVEL:.0%} t interval over the "
        "rounds. The two sides agree (yes) when the whole interval lies within the bound "
        "of 1; ratio only: the ratio does, the interval reaches past it; no: the ratio lies "
        "outside it.",
        "",
        markdown.table(table, columns),
        "",
    ]


def _bold_no(agrees: object) -> str:
    return "**no**" if agrees == "no" else str(agrees) if isinstance(agrees, str) else "–"
