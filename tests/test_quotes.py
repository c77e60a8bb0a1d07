"""The docs quote only the committed tables of the studies they name, and mark flagged runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from reports import quotes, sentinel

ROOT = Path(__file__).resolve().parents[1]
# README.md, every doc beside it, and each committed folder's README.md, which names its own
# folder throughout (legacy/ holds hand-typed studies without tables)
DOCS = [
    *((p, None) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]),
    *((p, p.parent) for p in sorted((ROOT / "docs" / "results").glob("*/README.md"))
      if p.parent.name != "legacy"),
]  # fmt: skip


STUDIES = sorted(p.parent for p in (ROOT / "docs" / "results").glob("*/study.json"))


def _name(doc: tuple[Path, Path | None]) -> str:
    return str(doc[0].relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_doc_quotes_only_the_tables_of_the_studies_it_names(doc):
    assert quotes.unquoted(doc[0], ROOT, doc[1]) == []


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_doc_says_when_a_number_is_a_flagged_runs(doc):
    assert quotes.unmarked(doc[0], ROOT, doc[1]) == []


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_doc_shows_only_figures_a_committed_study_makes(doc):
    assert quotes.foreign_images(doc[0], ROOT) == []


def test_an_image_no_study_makes_is_named(docs_copy):
    doc, root = docs_copy, docs_copy.parents[1]
    made = next((ROOT / "docs" / "results" / "tiny" / "figures").glob("*.png"))
    shown = f"![made](results/tiny/figures/{made.name})"
    doc.write_text(f"{shown}\n![old](results/legacy/smollm2/figures/x.png)\n![gone](x.png)\n")
    assert quotes.foreign_images(doc, root) == ["results/legacy/smollm2/figures/x.png", "x.png"]


@pytest.fixture
def docs_copy(tmp_path):
    """A copy of docs/PAIRING.md in a tree whose docs/results/ is the committed one."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results").symlink_to(ROOT / "docs" / "results")
    return Path(shutil.copy(ROOT / "docs" / "PAIRING.md", tmp_path / "docs" / "PAIRING.md"))


def test_a_doc_figure_missing_from_the_named_studys_tables_is_named(docs_copy):
    doc, root = docs_copy, docs_copy.parents[1]
    assert quotes.unquoted(doc, root) == []
    text = doc.read_text()
    # a figure of the instances-aa bullet, changed to one its tables lack
    quoted = "0.931"
    fabricated = next(
        f"{x:.3f}"
        for x in (0.931 + i / 1000 for i in range(1, 100))
        if f"{x:.3f}" not in quotes.table_numbers(ROOT / "docs" / "results" / "instances-aa")
    )
    assert text.count(quoted) == 1
    line = text[: text.index(quoted)].count("\n") + 1
    doc.write_text(text.replace(quoted, fabricated) + "\nA speedup of 1.85x, from nowhere.\n")
    last = len(doc.read_text().splitlines())
    assert quotes.unquoted(doc, root) == [
        f"line {line}: {fabricated}",
        f"line {last}: 1.85 (no study named)",
    ]


def test_a_flagged_runs_number_is_named_until_the_doc_says_so(docs_copy):
    doc, root = docs_copy, docs_copy.parents[1]
    study = ROOT / "docs" / "results" / "smollm2-instances-2026-11-28"
    table = pd.read_csv(study / "aggregates.csv")
    drifts = zip(table["reference_drift"], table["pairing"], strict=True)
    is_flagged = pd.Series([sentinel.is_flagged(d, p) for d, p in drifts], index=table.index)
    flagged = table[is_flagged & (table["k"] > 0)]  # a K = 0 run's 1.000 is no figure
    speedup = f"{flagged['speedup_tpot'].iloc[0]:.3f}"
    assert speedup in quotes.flagged_numbers(study)
    link = "[smollm2-instances-2026-11-28](results/smollm2-instances-2026-11-28/README.md)"
    doc.write_text(f"A speedup of {link} read {speedup}.\n")
    assert quotes.unmarked(doc, root) == [f"line 1: {speedup} (flagged run)"]
    doc.write_text(f"A speedup of {link} read {speedup} (flagged run).\n")
    assert quotes.unmarked(doc, root) == []


def test_a_runs_drift_is_judged_at_its_own_pairings_bound():
    """An interleaved run that moved past the sequential bound but not its own is no flagged
    run: its number needs no mark."""
    study = ROOT / "docs" / "results" / "smollm2-serving"
    table = pd.read_csv(study / "aggregates.csv")
    moved = table["reference_drift"].abs().between(sentinel.DRIFT, sentinel.DRIFT_INTERLEAVED)
    between = table[moved & (table["pairing"] == sentinel.INTERLEAVED)]
    assert not between.empty  # such a run is there to be judged
    assert quotes.flagged_runs(study).empty
    assert f"{between['speedup_tpot'].iloc[0]:.3f}" not in quotes.flagged_numbers(study)


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_every_run_flagged_now_is_kept_flagged_in_its_reports_flag_table(study):
    """Each run under ``raw/`` past its pairing's bound (what-if runs too, which the report's
    other tables leave out) is a "kept flagged" row of REPORT.md's flag table."""
    report = (study / "REPORT.md").read_text()
    table = report.partition("## Flagged runs")[2].split("\n## ", 1)[0]  # none: no runs
    for path in sorted(study.glob("raw/*/*/summary.json")):
        summary = json.loads(path.read_text())
        if sentinel.is_flagged(sentinel.drift(summary.get("reference")), summary.get("pairing")):
            row = f"| {path.parent.parent.name} | `{summary['run_id']}` |"
            rows = [line for line in table.splitlines() if line.startswith(row)]
            assert len(rows) == 1 and "kept flagged" in rows[0], (path, rows)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("read 1.85x, 0.341 and 47.1%; took 55 s and 3 min", ["1.85", "0.341", "47.1", "55", "3"]),
        ("30 problems at K = 3, 16 of 22 runs, on 2026-11-28", []),  # counts and dates
        ("Qwen2.5-14B, SmolLM2-135M, gemini-2.5-flash, vllm 0.11.0", []),  # names, versions
        ("`spec.k=1.5`, Python >= 3.11, thm. 3.8, a 95% CI", []),  # code, version, theorem
        ("moved more than 5%, within 10% of it, every 0.5 s", []),  # thresholds, polling
        ("`time make test` took 14 min 55 s", []),  # a test-suite timing
    ],
)
def test_figures_are_results_and_the_exempt_kinds_are_not(text, found):
    assert [f for _, f in quotes.figures(text)] == found


def test_every_exemption_gives_its_reason():
    assert all(isinstance(re.compile(p), re.Pattern) and why for p, why in quotes.EXEMPT.items())


def test_blocks_split_paragraphs_bullets_and_tables_and_skip_code():
    text = (
        "para one\nstill one\n\n- bullet\n  more\n- next\n\n| a |\n| b |\nafter\n\n```\n1.5\n```\n"
    )
    assert [b for _, b in quotes.blocks(text)] == [
        "para one\nstill one",
        "- bullet\n  more",
        "- next",
        "| a |\n| b |",
        "after",
    ]
