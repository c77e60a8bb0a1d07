"""``python -m study NAME``: run a study (``conf/study/NAME.yaml``), then write its folder.

    python -m study tiny                          # = make study NAME=tiny
    python -m study tiny allow_dirty=true         # from a dirty tree (the report says so)
    python -m study tiny rerun_flagged=0 engine.max_model_len=1024   # harness overrides too
    python -m study smollm2-serving sweeps=schedule   # run one sweep, keep the others' runs

Checks every override against each sweep first (as ``python -m harness -m`` would: bad
input is one line, exit 2, before any step), then builds the models it lacks, runs (or
resumes) its sweeps, re-runs the runs the drift sentinel flags, calibrates, runs
pre-flight and draftbench beside its peers as the study says, then writes
``docs/results/NAME/``: ``raw/`` (the runs, compacted; the peers step's rounds), ``study.json``
(provenance and the wall time and commit of each step, an earlier make's kept where its
runs are) and REPORT.md with the tables and figures its runs give (``python -m reports
--check docs/results/NAME`` regenerates and compares them).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.checks import command
from study import config

# the study's own keys among the overrides; every other one goes to each sweep's harness
STUDY_KEYS = ("allow_dirty", "rerun_flagged", "results_dir", "sweeps")
OWNED = ("experiment", "sweep")  # named by the study config, not the command line
RESULTS_DIR = Path("results") / "studies"  # <results_dir>/<study>/<sweep>/<job>/


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """The study's command-line options."""
    parser.add_argument(
        "name", nargs="?", help="the study: conf/study/<name>.yaml (none given: list them)"
    )
    parser.add_argument(
        "--docs-dir",
        type=Path,
        default=Path("docs/results"),
        help="parent of the study's folder (default: docs/results)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="allow_dirty=true (run from a dirty tree; the report says so), rerun_flagged=N "
        "(re-runs of a flagged run; default: the study's, else 2), results_dir=DIR (where "
        f"the runs go; default {RESULTS_DIR}/<name>), sweeps=A,B (run only these sweeps; "
        "the others keep their committed runs); any other: a harness override added to "
        "every sweep",
    )


def split_overrides(overrides: list[str]) -> tuple[dict[str, str], list[str]]:
    """The study's own keys (:data:`STUDY_KEYS`) and the harness overrides.

    Raises:
        StudyError: not ``key=value``, or a key the study config owns.
    """
    mine, harness = {}, []
    for override in overrides:
        key, eq, value = override.partition("=")
        if not eq:
            raise config.StudyError(f"{override}: use key=value")
        if key.lstrip("+~") in OWNED:
            raise config.StudyError(f"{override}: a study names its {key} (conf/study/<name>.yaml)")
        if key in STUDY_KEYS:
            mine[key] = value
        else:
            harness.append(override)
    return mine, harness


def _bool(key: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise config.StudyError(f"{key}={value}: true or false")
    return value.lower() == "true"


@command(ValueError)
def main(args: argparse.Namespace) -> int:
    """Run the study; print where its report went. Returns the exit code (2: bad input;
    1: a step failed)."""
    from study.runner import StepFailed, run

    if not args.name:
        raise config.StudyError(f"name a study (known: {', '.join(config.known())})")
    study = config.load(args.name)
    mine, harness = split_overrides(args.overrides)
    allow_dirty = _bool("allow_dirty", mine.get("allow_dirty", "false"))
    limit = None
    if "rerun_flagged" in mine:
        text = mine["rerun_flagged"]
        limit = config.check_rerun_flagged(int(text) if text.isdigit() else text)
    results_dir = Path(mine.get("results_dir") or RESULTS_DIR / study.name)
    only = config.check_only(study, mine["sweeps"]) if "sweeps" in mine else None
    config.check_sweeps(study, harness, results_dir)
    config.check_peers(study)
    said = shlex.join(["python", "-m", "study", study.name, *args.overrides])
    try:
        path = run(study, harness, results_dir, args.docs_dir, allow_dirty, limit, said,
                   only=only)  # fmt: skip
    except StepFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted: study {study.name} stopped; its finished runs are kept in "
            f"{results_dir} (running it again resumes)",
            file=sys.stderr,
        )
        return 130
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m study", description=__doc__.split("\n")[0])
    add_cli_args(cli)
    sys.exit(main(cli.parse_args()))
