"""A study's folder, ``docs/results/<name>/``, as the report reads it.

``raw/<sweep>/<job>/`` holds its runs (the harness's layout, compacted by ``python -m
study``), ``study.json`` what made them (the study's config, commit and tree, versions,
hardware, each step's command, wall time and commit, the drift sentinel's re-runs, the raw
data's size); ``REPORT.md`` (opening with the study's description, then how it was made after the
flagged runs), ``aggregates.csv``, ``fits.csv``, ``whatif.csv`` and ``figures/`` are
generated from both (:func:`write`), and ``agreement.csv`` from ``raw/peers.csv`` when
``bench/peers.py`` ran in the study. :func:`check` regenerates them elsewhere and lists
every difference, and every number the hand-written ``README.md`` quotes that no table
holds (:func:`unquoted`).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.results import SUMMARY
from reports import markdown, peers
from reports.quotes import quoted, table_numbers
from reports.report import make_report

STUDY_JSON = "study.json"
RAW = "raw"  # the runs, <sweep>/<job>/ as the harness writes them
README = "README.md"  # hand-written: quotes only numbers of the tables
REPORT = "REPORT.md"
TABLES = ("aggregates.csv", "fits.csv", "whatif.csv", peers.TABLE)
FIGURES = "figures"
# REPORT.md's link to docs/METRICS.md, relative to the folder's place: compared without it
METRICS_LINK = re.compile(r"\]\([^)\s]*METRICS\.md\)")
SHOWN = 5  # differing lines of REPORT.md listed one by one; the rest counted


def read_study(study_dir: Path) -> dict[str, Any]:
    """The folder's ``study.json``.

    Raises:
        ValueError: no such folder, or no readable ``study.json`` in it.
    """
    path = Path(study_dir) / STUDY_JSON
    if not Path(study_dir).is_dir():
        raise ValueError(f"{study_dir}: no such directory")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{study_dir}: no {STUDY_JSON} (a study folder is made by `make study`)"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None


def _size(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.2f} MB" if n_bytes >= 1e6 else f"{n_bytes / 1e3:.1f} kB"


def preface(study: dict[str, Any]) -> list[str]:
    """REPORT.md's opening, from ``study.json``: the study's name, a dirty tree's warning
    and its description."""
    git = study["git"]
    out = [f"## Study `{study['name']}`", ""]
    if git.get("dirty"):
        commit = f"`{(git.get('commit') or 'no commit')[:12]}`"
        out += [f"**Made from a dirty tree** (`allow_dirty=true`): commit {commit} plus "
                "uncommitted changes to tracked files, which nothing here records.", ""]  # fmt: skip
    return [*out, study.get("description", "").strip(), ""]


def made(study: dict[str, Any]) -> list[str]:
    """How the study was made, from ``study.json``: its command, tree, machine, each
    step's wall time (and commit, when the steps span several makes) and the raw data's
    size."""
    git, hw, ver = study["git"], study["hardware"], study["versions"]
    commit = f"`{(git.get('commit') or 'no commit')[:12]}`"
    tree = "a dirty tree" if git.get("dirty") else "a clean tree"
    # studies made before the ISA and memory were recorded say so, or nothing of the memory
    machine = [hw.get("cpu_isa") or "vector ISA not recorded", f"{hw.get('cpu_count')} cores",
               hw.get("memory_gib") and f"{hw['memory_gib']} GiB memory", hw.get("gpu") or "no GPU"]  # fmt: skip
    raw = study["raw"]
    steps = pd.DataFrame(study["steps"])
    columns = [("step", lambda r: r["step"]), ("wall time", lambda r: f"{r['wall_s']:.1f} s"),
               ("command", lambda r: f"`{r['command']}`")]  # fmt: skip
    passes = steps["commit"].nunique() if "commit" in steps else 1
    if passes > 1:  # earlier makes' steps, whose runs or calibrations the study keeps
        columns.insert(1, ("commit", lambda r: f"`{r['commit'][:12]}`"))
    kept = []
    if raw["runs"]:
        kept += [f"Raw data: `{RAW}/`, {raw['runs']} runs, {_size(raw['bytes'])} "
                 f"({_size(raw['bytes'] / raw['runs'])} per run on average, the largest "
                 f"{_size(raw['largest_bytes'])}); {raw['compaction']}.", ""]  # fmt: skip
    if study.get("config", {}).get("peers") is not None:
        kept += [f"`{RAW}/{peers.ROUNDS}`: every round of the peers step (`bench/peers.py "
                 "--csv`).", ""]  # fmt: skip
    at = f"at commit {commit}"
    if passes > 1:
        at = f"at {passes} commits (each step's in the table), the last {commit},"
    return ["## How the study was made", "",
            f"Made by `{study['command']}` {at} from {tree}, started "
            f"{study['started']}, on {hw.get('cpu')} ({', '.join(filter(None, machine))}) "
            f"with vLLM {ver.get('vllm')}, torch {ver.get('torch')}.", "",
            markdown.table(steps, columns), "", *kept]  # fmt: skip


def write(study_dir: Path, out_dir: Path | None = None) -> Path:
    """Generate REPORT.md, the tables and the figures of ``study_dir`` from its raw runs
    (and ``raw/peers.csv``: the agreement table, :mod:`reports.peers`) and ``study.json``
    into ``out_dir`` (default: the study folder); return REPORT.md."""
    study_dir = Path(study_dir)
    out = Path(out_dir or study_dir)
    study = read_study(study_dir)
    options = study["report"]
    opening = preface(study)
    rounds = study_dir / RAW / peers.ROUNDS
    (out / peers.TABLE).unlink(missing_ok=True)
    if rounds.is_file():
        table = peers.agreement(pd.read_csv(rounds))
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / peers.TABLE, index=False, float_format="%.6g")
        opening += peers.section(table)
    if not options["sweeps"]:  # a study of peers alone: no runs to aggregate or draw
        path = out / REPORT
        path.write_text("\n".join([*opening, *made(study)]))
        return path
    return make_report(
        study_dir / RAW, out, options["sweeps"], options["bootstrap"],
        options["seed"], slo=options["slo"] or None, source=RAW, link_dir=study_dir,
        preface=opening, made=made(study), reruns=study["sentinel"],
    )  # fmt: skip


def _csv_differs(committed: Path, fresh: Path) -> str | None:
    """Why two CSV tables differ (strings exactly, numbers to 1e-6 relative), or None."""
    a, b = pd.read_csv(committed), pd.read_csv(fresh)
    if list(a.columns) != list(b.columns):
        return f"columns differ: {sorted(set(a.columns) ^ set(b.columns)) or 'order'}"
    if len(a) != len(b):
        return f"{len(a)} rows committed, {len(b)} regenerated"
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            same = np.isclose(x.astype(float), y.astype(float), rtol=1e-6, atol=0, equal_nan=True)
        else:
            same = ((x.astype(str) == y.astype(str)) | (x.isna() & y.isna())).to_numpy(bool)
        if not same.all():
            row = int(np.flatnonzero(~same)[0])
            return (
                f"column {col}, row {row + 1}: {x.iloc[row]} committed, {y.iloc[row]} regenerated"
            )
    return None


def check(study_dir: Path) -> list[str]:
    """Every difference between the committed generated files of ``study_dir`` and the ones
    regenerated from its raw runs (the runs study.json lists, REPORT.md line by line but
    for the path of its link to docs/METRICS.md, which depends on the folder's place, the
    CSV tables numerically, the figures by name), and every number README.md quotes that
    no table holds."""
    study_dir = Path(study_dir)
    problems = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        fresh = Path(tmp)
        write(study_dir, fresh)
        for name in (REPORT, *TABLES):
            mine, new = study_dir / name, fresh / name
            if mine.is_file() != new.is_file():
                said = "regenerated but not committed" if new.is_file() else "not regenerated"
                problems.append(f"{name}: {said}")
            elif not mine.is_file():
                continue
            elif name == REPORT:
                problems += [f"{name}: {d}" for d in _line_diffs(mine, new)]
            elif why := _csv_differs(mine, new):
                problems.append(f"{name}: {why}")
        figures = [{p.name for p in (d / FIGURES).glob("*.png")} for d in (study_dir, fresh)]
        if figures[0] != figures[1]:
            problems.append(
                f"{FIGURES}/: committed {sorted(figures[0])}, regenerated {sorted(figures[1])}"
            )
    return (
        missing_runs(study_dir)
        + problems
        + [f"{README}: quotes {n}, which no table holds" for n in unquoted(study_dir)]
    )


def missing_runs(study_dir: Path) -> list[str]:
    """The runs ``study.json`` lists (``raw.jobs``, ``<sweep>/<job>``) that ``raw/`` lacks
    and, when its count of runs differs from the complete runs there, both counts."""
    study_dir = Path(study_dir)
    recorded = read_study(study_dir)["raw"]
    runs = [p.parent for p in (study_dir / RAW).glob(f"*/*/{SUMMARY}")]
    there = {f"{run.parent.name}/{run.name}" for run in runs if not run.name.startswith(".")}
    out = [f"{RAW}/{job}: missing (study.json lists it)"
           for job in recorded.get("jobs", []) if job not in there]  # fmt: skip
    if recorded["runs"] != len(there):
        out.append(f"{RAW}/: study.json records {recorded['runs']} runs, {len(there)} are there")
    return out


def _line_diffs(a: Path, b: Path) -> list[str]:
    """The lines where the committed text ``a`` and the regenerated ``b`` differ, the first
    :data:`SHOWN` quoted and the rest counted (the docs/METRICS.md link's path left out)."""
    old, new = (METRICS_LINK.sub("](METRICS.md)", p.read_text()).splitlines() for p in (a, b))
    found = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            mine = repr(old[i1 + k]) if i1 + k < i2 else "nothing"
            fresh = repr(new[j1 + k]) if j1 + k < j2 else "nothing"
            found.append(f"line {min(i1 + k, i2) + 1}: {mine} committed, {fresh} regenerated")
    more = [f"and {len(found) - SHOWN} more differing lines"] if len(found) > SHOWN else []
    return found[:SHOWN] + more


def unquoted(study_dir: Path) -> list[str]:
    """The speedups and rates README.md quotes (:func:`reports.quotes.quoted`) that no
    table of the study holds (:func:`reports.quotes.table_numbers`)."""
    readme = Path(study_dir) / README
    if not readme.is_file():
        return []
    have = table_numbers(study_dir)
    return [n for n in quoted(readme.read_text()) if n not in have]
