"""What a doc may quote: each result figure it states is in the committed tables of a study
it names beside it, a flagged run's said to be one, and only the figures a study makes shown.

A figure is a number with a decimal point (``1.025``, ``1.85x``, ``47.1%``) or a percentage
or time with its unit (``5%``, ``55 s``, ``3 min``); a bare integer (a count, a K, a date)
is not one. A paragraph, a bullet or a table names its studies by linking their folders
(``[tiny](results/tiny/README.md)``; a study's own README names its folder throughout):
every figure in it must be among the numbers of one of their tables (:func:`table_numbers`),
or be of a kind :data:`EXEMPT` lists (:func:`unquoted`); a figure only a flagged run's row
holds (:func:`flagged_numbers`) needs "flagged" in its block (:func:`unmarked`); an image
must be a figure a study with raw runs regenerates (:func:`foreign_images`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports import sentinel

RESULTS = Path("docs") / "results"
# a committed folder's files whose numbers a doc may quote: its generated report, the
# benchmark tables' printed summary, its CSV tables and study.json
TEXTS = ("REPORT.md", "summary.txt")
STUDY_JSON = "study.json"
RAW, SUMMARY = "raw", "summary.json"  # a study's runs: raw/<sweep>/<job>/summary.json
FIGURES = "figures"
# what names a run in a table's row and in its summary.json (a summary without a synthetic
# acceptance length is a table's 0)
RUN_KEYS = ("sweep_id", "variant", "dataset", "k", "concurrency", "synthetic_acceptance_length",
            "pairing", "instances")  # fmt: skip
ABSENT = {"synthetic_acceptance_length": 0}
# what a study README may quote: a speedup (1.85x) and a rate (0.341)
SPEEDUP = re.compile(r"(?<![\d.])(\d+\.\d+)x\b")
RATE = re.compile(r"(?<![\d.])(0\.\d{3})(?!\d|\.\d)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w]|\.\d)")
# a figure of a doc: a decimal (a speedup's x, a percentage or a unit may follow), or an
# integer percentage or time; not a part of a name (Qwen2.5, gemini-2.5, 135M) or a
# version (0.11.0)
UNIT = r"(?:%|ms\b|s\b|min\b|minutes?\b|h\b|hours?\b)"
FIGURE = re.compile(
    rf"(?<![\w.])(?<![A-Za-z]-)(\d+\.\d+|\d+(?=\s?{UNIT}))(?:x\b|\s?{UNIT})?(?![\w]|\.\d)"
)
# a section whose heading says it estimates states its assumptions, not results
ESTIMATES = re.compile(r"^#+ .*\bestimated\b", re.I)
# the only figures a doc states without a study's table, each with why (in this order)
EXEMPT = {
    r"(?s)\A(?=.*`time (?:CI=true bash \.ci/run|make test)).*": "a paragraph timing the "
    "test suite with `time` states the test suite's timings",
    r"(?:more\s+than|>|`DRIFT`,|`DRIFT_INTERLEAVED`,)\s*(?:5|20)%": "the drift sentinel's thresholds "
    "(reports/sentinel.py DRIFT, DRIFT_INTERLEAVED)",
    r"`[^`\n]*`": "a code span is a command or a configuration value (`spec.k=3`)",
    r"(?i:python|vllm|torch|cuda|version)\s*(?:>=\s*)?\d+(?:\.\d+)+": "a version",
    r"(?i:sec|thm|eq|fig)\.\s*\d+(?:\.\d+)*": "a section, theorem or equation number",
    r"95%(?=\s+(?:BCa|bootstrap|CI|t\s+interval|interval))": "the intervals' confidence level",
    r"every\s+\d+(?:\.\d+)?\s?s\b": "a polling interval of the code (`POLL_S`, `LOG_INTERVAL_S`)",
    r"within\s+[35]%\s+of\s+1": "the bounds of draftbench's ratios to vLLM's own tools "
    "(reports/peers.py LATENCY_BOUND, SERVE_BOUND)",
    r"within\s+10%": "the cost model's hit window (reports/fit.py and reports/whatif.py WITHIN)",
}


def quoted(text: str) -> list[str]:
    """The speedups (``1.85x``, without the x) and rates (``0.341``) a text quotes."""
    return sorted(set(SPEEDUP.findall(text)) | set(RATE.findall(text)))


def _json_numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _json_numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_numbers(v)


def _rounded(v: float, decimals: int) -> set[str]:
    """``v`` to 1 to ``decimals`` decimals, and to none only when it is a whole number (a
    rounded one would match almost any count or time)."""
    v = abs(v)  # prose gives the sign in words or with its own minus
    out = {f"{v:.{d}f}" for d in range(1, decimals + 1)}
    return out | ({f"{round(v)}"} if abs(v - round(v)) < 1e-9 else set())


def _forms(table: pd.DataFrame) -> set[str]:
    """A table's numbers to 1-3 decimals, as percentages to 1-2, and its seconds (``*_s``
    columns) as milliseconds to 1-2, each also as a whole number where it is one
    (:func:`_rounded`)."""
    found = set()
    for col in table.select_dtypes("number"):
        values = table[col].to_numpy(float)
        for v in values[np.isfinite(values)]:
            found |= _rounded(v, 3) | _rounded(100 * v, 2)
            if col.endswith("_s"):
                found |= _rounded(1000 * v, 2)
    return found


def table_numbers(folder: Path) -> set[str]:
    """Every number a committed folder's report or summary prints, and every number of its
    CSV tables and ``study.json`` (:func:`_forms`)."""
    folder = Path(folder)
    found = set()
    for name in TEXTS:
        if (folder / name).is_file():
            found |= set(NUMBER.findall((folder / name).read_text()))
    for csv in sorted(folder.glob("*.csv")):
        found |= _forms(pd.read_csv(csv))
    if (folder / STUDY_JSON).is_file():
        values = list(_json_numbers(json.loads((folder / STUDY_JSON).read_text())))
        found |= _forms(pd.DataFrame({"value": values}))
    return found


def _value(v: Any) -> str:
    """A key's value as one text whether read from JSON or CSV (3 and 3.0 alike)."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    return f"{float(v):g}" if isinstance(v, int | float | np.number) else str(v)


def _or_absent(summary: dict[str, Any], key: str) -> Any:
    value = summary.get(key)
    return ABSENT.get(key) if value is None else value


def flagged_runs(folder: Path) -> pd.DataFrame:
    """The :data:`RUN_KEYS` of each run under the folder's ``raw/`` that the drift sentinel
    flags (its reference moved within it beyond its pairing's
    :func:`reports.sentinel.threshold`)."""
    rows = []
    for path in sorted(Path(folder).glob(f"{RAW}/*/*/{SUMMARY}")):
        summary = json.loads(path.read_text())
        drift = sentinel.drift(summary.get("reference"))
        pairing = summary.get("pairing")
        if not path.parent.name.startswith(".") and sentinel.is_flagged(drift, pairing):
            rows.append({key: _value(_or_absent(summary, key)) for key in RUN_KEYS})
    return pd.DataFrame(rows, columns=list(RUN_KEYS))


def flagged_numbers(folder: Path) -> set[str]:
    """The numbers (:func:`_forms`) of the folder's CSV rows that hold a flagged run
    (:func:`flagged_runs`, matched on the keys a table has) and that no other row holds."""
    runs = flagged_runs(folder)
    found, others = set(), set()
    for csv in sorted(Path(folder).glob("*.csv")):
        table = pd.read_csv(csv)
        keys = [key for key in RUN_KEYS if key in table]
        if runs.empty or "sweep_id" not in keys:  # not a table of runs (peers' agreement)
            others |= _forms(table)
            continue
        mine = table[keys].map(_value).apply(tuple, axis=1)
        flag = mine.isin(set(runs[keys].apply(tuple, axis=1))).to_numpy(bool)
        found |= _forms(table[flag])
        others |= _forms(table[~flag])
    return found - others


def figures(text: str) -> list[tuple[int, str]]:
    """The figures ``text`` states (their numbers, without unit) with the line each is on
    (from 0), what :data:`EXEMPT` covers left out."""
    for pattern in EXEMPT:
        text = re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    return [(text.count("\n", 0, m.start()), m.group(1)) for m in FIGURE.finditer(text)]


def blocks(text: str) -> Iterator[tuple[int, str]]:
    """The paragraphs, bullets and tables of a markdown text with their first line's number;
    code (fenced, or indented four spaces after a blank line), headings and blank lines
    end one and are left out, and so are the sections of estimates (:data:`ESTIMATES`)."""
    lines: list[str] = []
    start, fenced, indented, blank, estimates = 0, False, False, True, False
    for i, line in enumerate([*text.splitlines(), ""], 1):
        if line.lstrip().startswith("```"):
            fenced, line = not fenced, ""
        indented = (line.startswith("    ") and (indented or (blank and not lines))) or (
            indented and not line.strip()
        )
        blank = not line.strip()
        bullet = re.match(r"(?:[-*]|\d+\.)\s", line)
        table_edge = lines and (line.startswith("|") != lines[-1].startswith("|"))
        if line.startswith("#"):
            estimates = bool(ESTIMATES.match(line))
        skip = fenced or indented or blank or line.startswith("#") or estimates
        if lines and (skip or bullet or table_edge):
            yield start, "\n".join(lines)
            lines = []
        if skip:
            continue
        if not lines:
            start = i
        lines.append(line)


def named_studies(block: str, doc: Path, root: Path) -> list[Path]:
    """The committed folders under docs/results/ that ``block`` links (relative to ``doc``)."""
    out = []
    for target in re.findall(r"\]\(([^)\s#]+)", block):
        path = (doc.parent / target).resolve()
        results = (root / RESULTS).resolve()
        if results in path.parents:
            folder = results / path.relative_to(results).parts[0]
            if folder.is_dir() and folder not in out:
                out.append(folder)
    return out


def _named(doc: Path, root: Path, own: Path | None) -> Iterator[tuple[int, str, list[Path]]]:
    """Each block of ``doc`` (:func:`blocks`) with the studies it names (``own`` always)."""
    for line, block in blocks(Path(doc).read_text()):
        studies = named_studies(block, Path(doc), root)
        if own is not None and Path(own).resolve() not in studies:
            studies.append(Path(own).resolve())
        yield line, block, studies


def unquoted(doc: Path, root: Path, own: Path | None = None) -> list[str]:
    """Each figure of ``doc`` that no table of the studies named beside it (and ``own``'s)
    holds, as ``line N: figure`` (``(no study named)`` where its block names none)."""
    numbers = functools.cache(table_numbers)  # each study read once, however often named
    out = []
    for line, block, studies in _named(doc, root, own):
        have = set().union(*map(numbers, studies))
        for offset, figure in figures(block):
            if figure not in have:
                where = "" if studies else " (no study named)"
                out.append(f"line {line + offset}: {figure}{where}")
    return out


def unmarked(doc: Path, root: Path, own: Path | None = None) -> list[str]:
    """Each figure of ``doc`` that only a flagged run's row of a study named beside it holds
    (:func:`flagged_numbers`), in a block that does not say "flagged", as ``line N: figure``."""
    numbers = functools.cache(flagged_numbers)  # each study read once, however often named
    out = []
    for line, block, studies in _named(doc, root, own):
        if "flagged" in block.lower():
            continue
        have = set().union(*map(numbers, studies))
        out += [f"line {line + o}: {f} (flagged run)" for o, f in figures(block) if f in have]
    return out


def foreign_images(doc: Path, root: Path) -> list[str]:
    """The images ``doc`` shows that no committed study made: each must be a file of a
    study's ``figures/`` whose ``raw/`` runs regenerate it."""
    doc, results = Path(doc), (Path(root) / RESULTS).resolve()
    out = []
    for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", doc.read_text()):
        path = (doc.parent / target).resolve()
        parts = path.relative_to(results).parts if results in path.parents else ()
        made = (
            len(parts) == 3
            and parts[1] == FIGURES
            and path.is_file()
            and (results / parts[0] / RAW).is_dir()
        )
        if not made:
            out.append(target)
    return out
