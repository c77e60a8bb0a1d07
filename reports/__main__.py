"""``python -m reports``: figures, tables and REPORT.md from every stored run.

    python -m reports                               # every sweep under results/
    python -m reports --results-dir results --out-dir reports/out --bootstrap 2000
    python -m reports --k-schedules sweep=tiny-serving  # the overrides of its K schedules
    python -m reports results_dir=DIR experiment=smollm2  # the sweep(s) those overrides wrote
    python -m reports --sweep tiny-serving slo.tpot_ms=20  # goodput under another SLO
    python -m reports --check docs/results/tiny  # a study's report regenerated and compared
    python -m reports --write docs/results/tiny  # ... and written (after a report change)

Writes ``<out-dir>/<name>/REPORT.md``, ``figures/*.png``, ``aggregates.csv``, ``fits.csv``,
``whatif.csv`` (what-if runs only);
``--check`` writes nothing and exits 1 on any difference (``reports.study.check``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.checks import command
from reports import bootstrap

SLO_PREFIX = "slo."
TRACKING = "tracking"  # tracking=mlflow, tracking.uri=URI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """The report's command-line options."""
    parser.add_argument(
        "--results-dir",
        type=Path,
        help="where the harness wrote results/<sweep>/<job>/ (default: results)",
    )
    parser.add_argument(
        "--sweep",
        action="append",
        dest="sweeps",
        metavar="NAME",
        help="a sweep to include (repeatable; default: every sweep)",
    )
    parser.add_argument(
        "--name", help="report name (default: the sweep names joined by '+', or 'all')"
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("reports/out"),
        help="parent of the report directory (default: reports/out)",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=bootstrap.N_BOOT,
        metavar="N",
        help=f"bootstrap replicates per interval (default: {bootstrap.N_BOOT})",
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    parser.add_argument(
        "--k-schedules",
        action="store_true",
        help="print the overrides that run each recommended K schedule, one line each, "
        "and write nothing",
    )
    parser.add_argument(
        "--check",
        type=Path,
        metavar="STUDY_DIR",
        help="regenerate a study folder's REPORT.md, tables and figures from its raw runs "
        "and study.json, compare them with the committed ones (and README.md's quoted "
        "numbers with the tables); print each difference, exit 1 on any; write nothing",
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="STUDY_DIR",
        help="regenerate a study folder's REPORT.md, tables and figures from its raw runs and "
        "study.json into the folder (after a change to the report's code)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a run was skipped (partial or corrupt) or there was none",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="the overrides of a `python -m harness -m` run: report the sweep(s) it wrote "
        "(its results_dir, sweep and experiment; other keys are ignored); slo.ttft_ms, "
        "slo.tpot_ms and slo.e2e_ms (ms, or null) replace that bound of every run's SLO "
        "in goodput; tracking=mlflow (tracking.uri=URI) logs the report to each sweep's "
        "MLflow experiment",
    )


@command(ValueError)
def main(args: argparse.Namespace) -> int:
    """Build the report; print where it went. Returns the exit code (2: bad input; 1: a
    ``--strict`` report that left runs out or had none)."""
    from reports.report import IncompleteReport, make_report

    if args.bootstrap < 10:
        raise ValueError(f"--bootstrap={args.bootstrap}: use at least 10 replicates")
    if args.check:
        from reports import study

        problems = study.check(args.check)
        for problem in problems:
            print(f"{args.check}/{problem}", file=sys.stderr)
        if not problems:
            print(f"{args.check}: REPORT.md, tables and figures regenerate as committed")
        return 1 if problems else 0
    if args.write:
        from reports import study

        print(f"wrote {study.write(args.write)}")
        return 0
    slo = _slo(args.overrides)
    tracker = _tracker(args.overrides)
    given = [o for o in args.overrides if not o.startswith(SLO_PREFIX)]
    if given and not (args.results_dir or args.sweeps):  # the sweeps those overrides wrote
        args.results_dir, args.sweeps = _written_sweeps(given)
    elif any(not o.startswith(TRACKING) for o in given):
        raise ValueError("give --results-dir/--sweep or harness overrides, not both")
    args.results_dir = args.results_dir or Path("results")
    if not args.results_dir.is_dir():
        print(f"error: --results-dir={args.results_dir}: no such directory", file=sys.stderr)
        return 2
    if args.k_schedules:
        from reports import load, tables

        found = tables.build_tables(
            load.load(args.results_dir, args.sweeps), args.bootstrap, slo=slo
        )
        for overrides in found.schedules["overrides"]:
            print(overrides)
        return 0
    name = args.name or ("+".join(args.sweeps) if args.sweeps else "all")
    try:
        path = make_report(
            args.results_dir, args.out_dir / name, args.sweeps, args.bootstrap, args.seed,
            strict=args.strict, slo=slo,
        )  # fmt: skip
    except IncompleteReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    first = path.read_text().split("\n\n")[1]
    print(first)
    if tracker is not None:
        from harness import tracking

        if not args.sweeps:
            print("warning: tracking: name the sweep (--sweep, or its overrides) to log "
                  "its report", file=sys.stderr)  # fmt: skip
        tracking.log_report(tracker, args.results_dir, args.sweeps or [], path)
    return 0


def _tracker(overrides: list[str]) -> str | None:
    """``tracking=mlflow`` (and ``tracking.uri=``) among ``overrides``: the store's URI
    ("" for the default store), else None.

    Raises:
        ValueError: another tracker, or a tracking key without ``tracking=mlflow``.
    """
    given = dict(o.split("=", 1) for o in overrides if o.startswith(TRACKING) and "=" in o)
    name = given.pop("tracking.name", given.pop(TRACKING, "none"))
    uri = given.pop("tracking.uri", "")
    if given:
        raise ValueError(f"{next(iter(given))}: unknown (tracking=mlflow and tracking.uri=URI)")
    if name not in ("none", "mlflow"):
        raise ValueError(f"tracking={name}: must be none or mlflow")
    if name == "none":
        if uri:
            raise ValueError("tracking.uri: give tracking=mlflow too")
        return None
    return "" if uri in ("null", "none", "None") else uri


def _slo(overrides: list[str]) -> dict[str, float | None]:
    """The SLO bounds among ``overrides`` (``slo.tpot_ms=20``; null: no bound).

    Raises:
        ValueError: an unknown bound, or a value that is not a positive number or null.
    """
    from harness.config import check_slo
    from harness.metrics import SLO_BOUNDS

    slo: dict[str, float | None] = {}
    for override in overrides:
        if not override.startswith(SLO_PREFIX):
            continue
        key, _, text = override.partition("=")
        name = key.removeprefix(SLO_PREFIX)
        if name not in SLO_BOUNDS:
            raise ValueError(f"{key}: unknown bound (one of slo.{', slo.'.join(SLO_BOUNDS)})")
        try:
            slo[name] = None if text in ("null", "none", "None") else float(text)
        except ValueError:
            raise ValueError(f"{override}: must be a number of ms or null") from None
    check_slo(slo)
    return slo


def _written_sweeps(overrides: list[str]) -> tuple[Path, list[str]]:
    """The results_dir and sweep names a harness multirun with ``overrides`` writes."""
    from harness.results import written_sweeps

    dirs = written_sweeps(overrides)
    roots = sorted({str(d.parent) for d in dirs})
    if len(roots) > 1:
        raise ValueError(f"results_dir={','.join(roots)}: one report reads one results_dir")
    return dirs[0].parent, [d.name for d in dirs]


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split("\n")[0])
    add_cli_args(cli)
    sys.exit(main(cli.parse_args()))
