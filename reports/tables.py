"""The report's computed tables: aggregates, fits, verdicts, everything figures and the
markdown read. Bootstraps are seeded, so the same runs give the same tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from reports import (
    aggregate,
    bootstrap,
    fit,
    hypotheses,
    load,
    rejections,
    sentinel,
    serving,
    specbench,
    whatif,
)


@dataclass(frozen=True)
class ReportTables:
    """Everything the figures and the markdown read."""

    requests: pd.DataFrame
    runs: pd.DataFrame
    skipped: tuple[load.Skipped, ...]
    flagged: pd.DataFrame  # sentinel.flagged: the runs it flags, what-if runs among them
    table: pd.DataFrame  # aggregate + serving.with_batch_sizes + fit.with_predictions, by group
    headline: pd.DataFrame  # aggregate.headline
    positions: pd.DataFrame  # aggregate.positions
    fits: pd.DataFrame  # fit.fit: best K per draft configuration
    rejections: pd.DataFrame  # rejections.rejection_kinds
    verdicts: tuple[hypotheses.Verdict, ...]
    model_check: str  # fit.model_check: the cost model's hit rate, one line
    serving: pd.DataFrame  # serving.by_rate: the server backend's groups by request rate
    crossovers: pd.DataFrame  # serving.crossovers: where speculation stops paying
    schedules: pd.DataFrame  # serving.k_schedules: the K per batch size to deploy
    schedule_checks: pd.DataFrame  # serving.schedule_checks: each schedule's run vs fixed K
    whatif: pd.DataFrame  # whatif.surface: runs at a set acceptance, measured vs predicted
    whatif_runs: pd.DataFrame  # the runs at a set acceptance (whatif.split), one row each
    one_chunk: pd.DataFrame  # serving.one_chunk: server runs whose outputs came in one chunk


def _with_series(df: pd.DataFrame, multi_sweep: bool) -> pd.DataFrame:
    """Add ``series``, the legend label: the variant, prefixed by its sweep when the
    report covers several sweeps."""
    if df.empty:
        return df.assign(series=pd.Series(dtype="str"))
    series = df["sweep_id"] + "/" + df["variant"] if multi_sweep else df["variant"]
    return df.assign(series=series)


def build_tables(
    results: load.Results,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
    slo: Mapping[str, float | None] | None = None,
) -> ReportTables:
    """Aggregate, fit and judge the loaded runs (goodput under each run's SLO, with the
    bounds ``slo`` names in its place). What-if runs go to their own table alone; the
    sentinel judges every run."""
    flagged = sentinel.flagged(results.runs)
    results, synthetic = whatif.split(results)
    req = results.requests.assign(window=aggregate.windows(results.requests, results.runs))
    runs = aggregate.with_goodput(req, aggregate.with_lossless(req, results.runs), slo)
    positions = aggregate.positions(req, n_boot, seed)
    table = aggregate.aggregate(req, runs, n_boot, seed)
    table = serving.with_batch_sizes(table, req, runs)
    table = fit.with_predictions(table, positions, runs, req)
    table = table.merge(specbench.spec_bench(req), on=list(aggregate.GROUP), how="left")
    multi = req["sweep_id"].nunique() > 1
    fits = fit.fit(table, req, runs, n_boot, seed)
    return ReportTables(
        requests=_with_series(req, multi),
        runs=runs,
        skipped=results.skipped,
        flagged=flagged,
        table=_with_series(table, multi),
        headline=_with_series(aggregate.headline(table), multi),
        positions=_with_series(positions, multi),
        fits=_with_series(fits, multi),
        rejections=_with_series(rejections.rejection_kinds(req), multi),
        verdicts=tuple(hypotheses.judge(req, table, n_boot, seed)),
        model_check=fit.model_check(table, fits) if not fits.empty else "",
        serving=_with_series(serving.by_rate(table), multi),
        crossovers=serving.crossovers(table),
        schedules=serving.k_schedules(table, req),
        schedule_checks=serving.schedule_checks(table),
        whatif=_with_series(whatif.surface(synthetic, n_boot, seed), multi),
        whatif_runs=synthetic.runs,
        one_chunk=serving.one_chunk(req),
    )
