"""Spec-Bench's MAT and speedup on runs with hand-set numbers, against our own definitions."""

from __future__ import annotations

import pytest

from reports import load, markdown, specbench, tables
from tests import run_fixtures

V = {v.name: v for v in run_fixtures.SEED_STUDY}
TOKENS = [10, 20, 30, 40]
STEPS = [3, 4, 3, 3]  # verify steps per request at K = 2
ACCEPTED = [3, 4, 3, 5]


@pytest.fixture
def requests(tmp_path):
    """cot at K=0 and cot_sd at K=2 on 4 problems; the spec run's request speeds differ
    (20, 20, 20, 10 tokens/s) so a mean of ratios and a ratio of sums disagree."""
    base = run_fixtures.Job("h", V["cot"], "synth_easy", "easy", 0, n_problems=4)
    spec = run_fixtures.Job("h", V["cot_sd"], "synth_easy", "easy", 2, n_problems=4)
    run_fixtures.write_job(tmp_path, base, run_fixtures.with_columns(
        run_fixtures.records(base), output_tokens=TOKENS, e2e_s=[1.0, 2.0, 3.0, 4.0]))  # fmt: skip
    run_fixtures.write_job(tmp_path, spec, run_fixtures.with_columns(
        run_fixtures.records(spec), output_tokens=TOKENS, e2e_s=[0.5, 1.0, 1.5, 4.0],
        acceptance_histogram=[[0, 3, 0]] * 4, num_spec_steps=STEPS,
        num_draft_tokens=[2 * s for s in STEPS], num_accepted_tokens=ACCEPTED))  # fmt: skip
    return load.load(tmp_path).requests


def by_k(series):
    return series.groupby(level="k").first()


def test_mat_counts_the_prefill_step_and_is_one_without_drafts(requests):
    mat = by_k(specbench.mean_accepted_tokens(requests))
    assert mat[0] == 1.0
    assert mat[2] == pytest.approx(sum(TOKENS) / (sum(STEPS) + 4))  # 100 tokens, 17 forwards
    # ours: 1 + accepted / verify steps, no prefill step
    spec = requests[requests["k"] == 2]
    assert 1 + spec["num_accepted_tokens"].sum() / spec["num_spec_steps"].sum() != mat[2]


def test_speedup_is_mean_of_request_speeds_over_the_baselines(requests):
    speed = by_k(specbench.speedup(requests))
    assert speed[0] == 1.0
    assert speed[2] == pytest.approx(17.5 / 10.0)  # (20 + 20 + 20 + 10) / 4 over 10
    # ours (ratio of sums) differs: 100 tokens in 7 s vs 100 in 10 s
    assert speed[2] != pytest.approx((100 / 7.0) / (100 / 10.0))


def test_spec_bench_table_has_one_row_per_group(requests):
    table = specbench.spec_bench(requests).set_index("k")
    assert list(table.index) == [0, 2]
    assert table.loc[2, "spec_bench_speedup"] == pytest.approx(1.75)
    assert specbench.spec_bench(requests.iloc[:0]).empty


def test_report_shows_both_definitions_side_by_side(requests, tmp_path):
    results = load.load(tmp_path)
    text = markdown.report(tables.build_tables(results, n_boot=20), [], "r", None, 20, 0, tmp_path)
    section = text.split("## Spec-Bench's definitions beside ours")[1].split("\n## ")[0]
    spec_row = next(
        line for line in section.splitlines() if line.startswith("| synth_easy | cot_sd")
    )
    # ours 1 + 15/13, MAT 100/17; TPOT speedup (fixture TPOTs), Spec-Bench's 1.75
    assert spec_row.startswith("| synth_easy | cot_sd | 1 | 2 | 2.15 | 5.88 | ")
    assert spec_row.endswith(" | 1.75 |")
