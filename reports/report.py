"""From stored runs to ``<out>/<name>/REPORT.md`` + ``figures/*.png`` + CSV tables.

Compute (:mod:`reports.tables`), draw (:mod:`reports.figures`), write
(:mod:`reports.markdown`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reports import bootstrap, figures, load, markdown, tables


def make_report(
    results_dir: str | Path,
    out_dir: str | Path,
    sweeps: list[str] | None = None,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
    strict: bool = False,
    slo: Mapping[str, float | None] | None = None,
    source: str | None = None,
    link_dir: Path | None = None,
    preface: Sequence[str] = (),
    made: Sequence[str] = (),
    reruns: Mapping[str, Any] | None = None,
) -> Path:
    """Load, aggregate, draw and write the report into ``out_dir``; return REPORT.md.
    Goodput counts each run against its config's SLO, with the bounds ``slo`` names in
    its place.

    REPORT.md names ``results_dir`` as ``source`` when given (and skipped runs by their
    path under it), links relative to ``link_dir`` (default ``out_dir``: where it will be
    read), starts with the ``preface`` lines and gives the ``made`` lines (how a study made
    its runs) after the flagged runs, which name what ``reruns`` (a study's ``sentinel``
    record) says of each; so a report regenerated elsewhere from the same runs reads the
    same.

    Runs skipped as partial or corrupt are listed on stderr (and in REPORT.md); the cost
    model's check (:func:`reports.fit.model_check`) is printed.

    Raises:
        ValueError: a named sweep does not exist.
        IncompleteReport: with ``strict``, after writing, when a run was skipped or there
            was none.
    """
    out = Path(out_dir)
    results = load.load(results_dir, sweeps)
    for skipped in results.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if source is not None:
        relative = tuple(
            dataclasses.replace(s, path=os.path.relpath(s.path, results_dir))
            for s in results.skipped
        )
        results = dataclasses.replace(results, skipped=relative)
    computed = tables.build_tables(results, n_boot, seed, slo)
    fig_dir = out / "figures"
    for old in fig_dir.glob("*.png") if fig_dir.is_dir() else []:
        old.unlink()
    shown = figures.render_report(computed, fig_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"aggregates.csv": computed.table, "fits.csv": computed.fits,
               "whatif.csv": computed.whatif}  # fmt: skip
    for name, df in written.items():
        (out / name).unlink(missing_ok=True)
        if not df.empty:
            df.to_csv(out / name, index=False, float_format="%.6g")
    path = out / "REPORT.md"
    text = markdown.report(
        computed, shown, source or str(results_dir), sweeps, n_boot, seed, link_dir or out,
        preface, made, reruns,
    )  # fmt: skip
    path.write_text(text)
    if computed.model_check:
        print(computed.model_check)
    if strict and (results.skipped or computed.table.empty):
        left_out = f"{len(results.skipped)} run(s) skipped" if results.skipped else "no runs"
        raise IncompleteReport(f"{path}: {left_out} (--strict)")
    return path


class IncompleteReport(Exception):
    """A strict report that left runs out or had none; the message says which."""
