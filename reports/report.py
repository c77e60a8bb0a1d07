"""From stored runs to ``<out>/<name>/REPORT.md`` + ``figures/*.png`` + CSV tables.

Compute (:func:`build_tables`), draw (:mod:`reports.figures`), write
(:mod:`reports.markdown`). Bootstraps are seeded, so the same runs give the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports import aggregate, bootstrap, figures, fit, hypotheses, load, markdown, rejections


@dataclass(frozen=True)
class ReportTables:
    """Everything the figures and the markdown read."""

    requests: pd.DataFrame
    runs: pd.DataFrame
    skipped: tuple[load.Skipped, ...]
    table: pd.DataFrame  # aggregate.aggregate: one row per group
    headline: pd.DataFrame  # aggregate.headline
    positions: pd.DataFrame  # aggregate.positions
    fits: pd.DataFrame  # fit.fit
    rejections: pd.DataFrame  # rejections.rejection_kinds
    verdicts: tuple[hypotheses.Verdict, ...]


def _with_series(df: pd.DataFrame, multi_sweep: bool) -> pd.DataFrame:
    """Add ``series``, the legend label: the variant, prefixed by its sweep when the
    report covers several sweeps."""
    if df.empty:
        return df.assign(series=pd.Series(dtype="str"))
    series = df["sweep_id"] + "/" + df["variant"] if multi_sweep else df["variant"]
    return df.assign(series=series)


def build_tables(results: load.Results, n_boot: int = bootstrap.N_BOOT, seed: int = 0):
    """Aggregate, fit and judge the loaded runs."""
    req, runs = results.requests, results.runs
    table = aggregate.aggregate(req, runs, n_boot, seed)
    multi = req["sweep_id"].nunique() > 1
    return ReportTables(
        requests=_with_series(req, multi),
        runs=runs,
        skipped=results.skipped,
        table=_with_series(table, multi),
        headline=_with_series(aggregate.headline(table), multi),
        positions=_with_series(aggregate.positions(req, n_boot, seed), multi),
        fits=_with_series(fit.fit(table, req, runs, n_boot, seed), multi),
        rejections=_with_series(rejections.rejection_kinds(req), multi),
        verdicts=tuple(hypotheses.judge(req, table, n_boot, seed)),
    )


def make_report(
    results_dir: str | Path,
    out_dir: str | Path,
    sweeps: list[str] | None = None,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
) -> Path:
    """Load, aggregate, draw and write the report into ``out_dir``; return REPORT.md.

    Raises:
        ValueError: a named sweep does not exist.
    """
    out = Path(out_dir)
    results = load.load(results_dir, sweeps)
    tables = build_tables(results, n_boot, seed)
    fig_dir = out / "figures"
    for old in fig_dir.glob("*.png") if fig_dir.is_dir() else []:
        old.unlink()
    shown = figures.render_report(tables, fig_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in (("aggregates.csv", tables.table), ("fits.csv", tables.fits)):
        (out / name).unlink(missing_ok=True)
        if not df.empty:
            df.to_csv(out / name, index=False, float_format="%.6g")
    path = out / "REPORT.md"
    path.write_text(markdown.report(tables, shown, str(results_dir), sweeps, n_boot, seed))
    return path
