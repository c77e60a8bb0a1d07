"""What the drift sentinel's drift does to a run's paired speedup (prints tables, writes CSVs).

    python bench/sentinel.py                     # every committed study with raw data
    python bench/sentinel.py --out DIR --bootstrap 200

Reads each study's raw runs (``docs/results/<study>/raw``) through ``reports.load`` and
``reports.aggregate`` (every group of these studies is one run) and, per run: its drift
(``reports.sentinel.drift``: end / start - 1), its TPOT speedup with its BCa interval, and
how far that speedup sits from what it should be, in units of the interval's half-width:
``aa_distance`` = |speedup - 1| for an interleaved K = 0 run (A/A), ``repeat_distance`` =
|speedup - median| over the runs of the same configuration in the study's other sweeps
(repeats: the same report group and the same ``config_hash``, so engine settings the
report does not group by, such as ``engine.multiprocessing``, tell runs apart); ``moved``
when that value lies outside the interval (a run with either value is judged). Within
each run, the requests' first and second half in run order (each engine instance's own) give
``half_move``: the second half's paired speedup over the first's - 1, and ``base_move`` /
``job_move``: the same for the baseline side's and the job's own TPOT alone, which the
machine's drift moves when pairing does not cancel it; ``half_beyond`` when the halves'
move exceeds the run's interval (its half-width over the speedup).

Writes ``runs.csv`` (the runs), ``bins.csv`` (interleaved runs by |drift|: how often their
halves moved beyond the interval, how often a judged run moved) and ``studies.csv`` (per
study and over all: runs flagged by 5% for every run and by ``reports.sentinel``'s rule,
the false-flag rate of each: the share of flagged judged runs that did not move, and the
rank correlations of drift with the baseline side's and the paired speedup's half moves).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from reports import aggregate, bootstrap, load, sentinel

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "sentinel-evidence"
RUN = [*aggregate.RUN, "pairing", "k", "instances"]
TPOT = aggregate.SPEEDUPS["speedup_tpot"]
PAIR_TPOT = aggregate.PAIRED["speedup_tpot"]
# a configuration across sweeps: its report group and every hashed config value
CONFIG = [*(c for c in aggregate.GROUP if c != "sweep_id"), "config_hash"]
EDGES = (0.0, 0.05, 0.10, 0.20, np.inf)  # the |drift| bins of bins.csv
ALL = "all"  # studies.csv's row over every study
MOVES = ("half_move", "base_move", "job_move")  # second half over first - 1 (module doc)
POINT = 10  # bootstrap replicates where only the point estimate is read


def studies(results: Path) -> list[Path]:
    """The study folders under ``results`` with raw runs (a study of peers alone has none)."""
    return sorted({p.parents[3] for p in results.glob("*/raw/*/*/summary.json")})


def _halves(df: pd.DataFrame) -> pd.DataFrame:
    """Per run: the paired TPOT speedup of each half (``reports.bootstrap.paired``'s point)
    and each side's TPOT, second half over first - 1."""
    rank = df.groupby([*aggregate.RUN, "instance"]).cumcount()
    size = df.groupby([*aggregate.RUN, "instance"])["n"].transform("size")
    df = df.assign(_half=(rank >= size / 2).astype(int))
    halves = aggregate.blocks(df, (*aggregate.RUN, "_half"))
    rows = {}
    for (sweep, run, half), block in halves.items():
        job, base = block.arrays((TPOT,)), block.arrays((PAIR_TPOT,))
        paired = base[1].sum() > 0
        rows.setdefault((sweep, run), {})[half] = (
            bootstrap.paired(job, base, "ratio", POINT)[0][0] if paired else np.nan,
            bootstrap.ratio(*base, POINT)[0][0] if paired else np.nan,
            bootstrap.ratio(*job, POINT)[0][0],
        )
    out = []
    for (sweep, run), by_half in rows.items():
        first, second = by_half[0], by_half[1]
        moves = [b / a - 1 for a, b in zip(first, second, strict=True)]
        out.append((sweep, run, *moves))
    return pd.DataFrame(out, columns=[*aggregate.RUN, *MOVES])


def measure(study: Path, n_boot: int) -> pd.DataFrame:
    """One row per run of ``study``: drift, speedup and interval, distances, half moves."""
    results = load.load(study / "raw")
    runs, requests = results.runs, results.requests
    table = aggregate.aggregate(requests, runs, n_boot)
    if (table["n_runs"] != 1).any():
        raise SystemExit(f"{study.name}: a group pools several runs; this table is per run")
    keys = runs.astype({c: table[c].dtype for c in aggregate.GROUP})
    keys["drift"] = [sentinel.drift(r) for r in _reference(runs)]
    cols = ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi", "reference_shift"]
    rows = keys[[*aggregate.GROUP, "run_id", "config_hash", "drift"]].merge(
        table[[*aggregate.GROUP, *cols]]
    )
    half = (rows["speedup_tpot_hi"] - rows["speedup_tpot_lo"]) / 2
    aa = (rows["k"] == 0) & (rows["pairing"] == sentinel.INTERLEAVED)
    rows["aa_distance"] = ((rows["speedup_tpot"] - 1).abs() / half).where(aa)
    median = rows.groupby(CONFIG, dropna=False)["speedup_tpot"].transform("median")
    repeats = rows.groupby(CONFIG, dropna=False)["run_id"].transform("size")
    rows["repeat_distance"] = ((rows["speedup_tpot"] - median).abs() / half).where(
        (repeats > 1) & ~aa
    )
    rows["moved"] = (rows[["aa_distance", "repeat_distance"]].max(axis=1) > 1).where(
        rows["aa_distance"].notna() | rows["repeat_distance"].notna()
    )
    paired = requests[requests["pairing"] == sentinel.INTERLEAVED]
    halves = pd.DataFrame(columns=[*aggregate.RUN, *MOVES])
    if len(paired):
        halves = _halves(aggregate.with_sums(aggregate.answered(paired)))
    rows = rows.merge(halves, how="left")
    rows["half_beyond"] = (rows["half_move"].abs() > half / rows["speedup_tpot"]).where(
        rows["half_move"].notna()
    )
    rows["flagged_5pct"] = [sentinel.is_flagged(d) for d in rows["drift"]]
    rows["flagged"] = [
        sentinel.is_flagged(d, p) for d, p in zip(rows["drift"], rows["pairing"], strict=True)
    ]
    return rows.assign(study=study.name)[
        ["study", *RUN, "drift", "reference_shift", *cols[:3], "aa_distance",
         "repeat_distance", "moved", *MOVES, "half_beyond",
         "flagged_5pct", "flagged"]
    ]  # fmt: skip


def bins(runs: pd.DataFrame) -> pd.DataFrame:
    """Interleaved runs by |drift| (:data:`EDGES`): runs, how many halves moved beyond the
    interval and their share, judged runs, how many moved and their share."""
    paired = runs[runs["pairing"] == sentinel.INTERLEAVED]
    by = pd.cut(paired["drift"].abs(), list(EDGES), include_lowest=True)
    out = (
        paired.groupby(by, observed=False)
        .agg(
            runs=("run_id", "size"),
            half_beyond=("half_beyond", "sum"),
            judged=("moved", "count"),
            moved=("moved", "sum"),
        )
        .astype(int)
    )
    out["half_beyond_share"] = out["half_beyond"] / out["runs"]  # an empty bin's: NaN
    out["moved_share"] = out["moved"] / out["judged"]
    edges = pd.DataFrame({"drift_above": EDGES[:-1], "drift_up_to": EDGES[1:]})
    return pd.concat([edges, out.reset_index(drop=True)], axis=1)


def _counts(runs: pd.DataFrame) -> dict[str, float]:
    """Flag counts and false-flag rates of one set of runs, and the rank correlations."""
    judged = runs["moved"].notna()
    moved = runs["moved"].astype(float).fillna(0) > 0
    row: dict[str, float] = {"runs": len(runs), "judged": int(judged.sum()),
                             "moved": int(moved.sum())}  # fmt: skip
    for flag in ("flagged_5pct", "flagged"):
        flagged = runs[flag].astype(bool)
        row[flag] = int(flagged.sum())
        row[f"{flag}_judged"] = int((flagged & judged).sum())
        row[f"{flag}_moved"] = int((flagged & moved).sum())
        row[f"{flag}_false_rate"] = (
            1 - row[f"{flag}_moved"] / row[f"{flag}_judged"] if row[f"{flag}_judged"] else np.nan
        )
    paired = runs[runs["pairing"] == sentinel.INTERLEAVED]
    for side in ("base_move", "half_move"):
        row[f"spearman_drift_{side}"] = (
            paired["drift"].corr(paired[side], method="spearman") if len(paired) > 2 else np.nan
        )
    return row


def studies_table(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`_counts` per study and over all (the row :data:`ALL`)."""
    rows = [{"study": name, **_counts(group)} for name, group in runs.groupby("study")]
    return pd.DataFrame([*rows, {"study": ALL, **_counts(runs)}])


def _reference(runs: pd.DataFrame) -> list[dict[str, float]]:
    """Each run's ``reference`` as its summary holds it."""
    return [
        {"start_s": s, "end_s": e}
        for s, e in zip(runs["reference_start_s"], runs["reference_end_s"], strict=True)
    ]


def main() -> None:
    """Measure every study, print the tables and write them as CSVs."""
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--results", type=Path, default=RESULTS, help="the studies' folder")
    cli.add_argument(
        "--out", type=Path, default=OUT, help="where runs.csv, bins.csv and studies.csv go"
    )
    cli.add_argument("--bootstrap", type=int, default=bootstrap.N_BOOT, help="replicates")
    args = cli.parse_args()
    runs = pd.concat([measure(s, args.bootstrap) for s in studies(args.results)])
    args.out.mkdir(parents=True, exist_ok=True)
    tables = {"runs.csv": runs, "bins.csv": bins(runs), "studies.csv": studies_table(runs)}
    for name, table in tables.items():
        table.to_csv(args.out / name, index=False)
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        for name, table in tables.items():
            print(f"{name}:\n{table.to_string(index=False, float_format='{:.3f}'.format)}\n")


if __name__ == "__main__":
    main()
