"""The what-if surface: drafts accepted at a set rate (vLLM's synthetic rejection sampling,
made to run on CPU here), kept out of every other table, beside the cost model."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from harness import results
from harness.backends.engine import EngineSpec
from harness.backends.synthetic import accept
from harness.config import ConfigError, compose_config, validate
from harness.sweep.runner import job_info
from reports import load, whatif


def _accept(drafts, ends, rates, draws, rows=None, k=3):
    out = torch.full((len(ends), k + 1), -1, dtype=torch.int32)
    rejected = torch.tensor([100 + i for i in range(len(drafts))])
    bonus = torch.tensor([[900 + r] for r in range(len(ends))])
    accept(
        out,
        torch.tensor(ends),
        torch.tensor(drafts),
        rejected,
        bonus,
        torch.tensor(draws, dtype=torch.float64),
        torch.tensor(rates, dtype=torch.float32),
        rows,
    )
    return out.tolist()


def test_a_draft_is_accepted_while_its_draw_is_below_the_positions_rate():
    # request 0: positions 0 and 1 accepted, 2 rejected (its draw 0.9 >= rate 0.5)
    # request 1: all three accepted, then its bonus token
    got = _accept([1, 2, 3, 4, 5, 6], [3, 6], [1.0, 1.0, 0.5], [0.1, 0.2, 0.9, 0.1, 0.2, 0.3])
    assert got == [[1, 2, 102, -1], [4, 5, 6, 901]]


def test_a_padded_draft_is_never_accepted_and_unchosen_requests_are_left_alone():
    got = _accept([1, -1, 3, 4, 5, 6], [3, 6], [1.0, 1.0, 1.0], [0.0] * 6, torch.tensor([1, 0]))
    assert got == [[1, 101, -1, -1], [-1, -1, -1, -1]]


@pytest.mark.parametrize(
    ("k", "length", "why"),
    [
        (0, 2.0, "needs spec.k > 0"),
        (3, 4.5, "must be between 1 and spec.k + 1 = 4"),
        (3, 0.5, "must be between 1 and spec.k + 1 = 4"),
    ],
)
def test_a_bad_acceptance_length_names_the_key(k, length, why):
    cfg = compose_config(
        ["variant=cot_sd", f"spec.k={k}", f"spec.synthetic_acceptance_length={length}"]
    )
    message = f"spec.synthetic_acceptance_length={length}: {why}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(cfg)


def test_the_engine_gets_vllms_synthetic_sampler_and_the_job_its_own_name_and_column():
    cfg = compose_config(["variant=cot_sd", "spec.k=3", "spec.synthetic_acceptance_length=2.5"])
    spec = EngineSpec.from_config(cfg).llm_kwargs()["speculative_config"]
    assert spec["rejection_sample_method"] == "synthetic"
    assert spec["synthetic_acceptance_length"] == 2.5
    assert "-k3-c1-a2.5-" in results.job_name(cfg)
    assert job_info(cfg).synthetic_acceptance_length == 2.5
    real = compose_config(["variant=cot_sd", "spec.k=3"])
    assert (
        "rejection_sample_method"
        not in EngineSpec.from_config(real).llm_kwargs()["speculative_config"]
    )


def test_the_sweeper_drops_lengths_beyond_k_plus_one():
    from harness.sweep.sweeper import plan

    jobs = []
    for k in (1, 3):
        for length in (1.0, 2.0, 4.0):
            o = ["variant=cot_sd", f"spec.k={k}", f"spec.synthetic_acceptance_length={length}"]
            jobs.append((o, compose_config(o)))
    got = plan(jobs)
    assert len(got.jobs) == 5 and got.beyond_k == 1
    assert "1 with spec.synthetic_acceptance_length above spec.k + 1" in got.note()


def _surface(points: list[tuple[int, float, float]]) -> pd.DataFrame:
    k, length, speedup = zip(*points, strict=True)
    return pd.DataFrame(
        {"series": "cot_sd", "dataset": "x", "concurrency": 1, "k": k,
         "mean_acceptance_length": length, "speedup_tpot": speedup}
    )  # fmt: skip


def test_the_length_two_x_needs_is_read_between_the_measured_points():
    got = whatif.needed(_surface([(3, 1.0, 0.8), (3, 2.0, 1.5), (3, 3.0, 2.5), (1, 2.0, 1.4)]))
    by_k = got.set_index("k")
    assert by_k.loc[3, "needed"] == pytest.approx(2.5)  # 1.5 -> 2.5 between 2 and 3
    assert np.isnan(by_k.loc[1, "needed"]) and by_k.loc[1, "best"] == 1.4


def test_the_surface_figure_draws_each_ks_line_with_the_cost_model_and_none_without_runs():
    from types import SimpleNamespace

    from reports.figures import fig_whatif

    rows = _surface([(k, x, 0.5 + 0.4 * x) for k in (1, 3) for x in (1.0, 1.5, 2.0)])
    rows = rows.assign(speedup_tpot_lo=rows["speedup_tpot"] - 0.05,
                       speedup_tpot_hi=rows["speedup_tpot"] + 0.05,
                       speedup_tpot_predicted=rows["speedup_tpot"] * 1.02)  # fmt: skip
    fig = fig_whatif(SimpleNamespace(whatif=rows))
    ax = fig.axes[0]
    assert ax.get_title() == "cot_sd"
    assert len([line for line in ax.get_lines() if line.get_linestyle() == "--"]) == 2
    assert fig_whatif(SimpleNamespace(whatif=rows.iloc[0:0])) is None


def test_what_if_runs_are_split_from_the_real_ones():
    runs = pd.DataFrame({"run_id": ["a", "b"], whatif.SYNTHETIC: [load.REAL_ACCEPTANCE, 2.0]})
    real, synthetic = whatif.split(load.Results(runs.iloc[0:0], runs, ()))
    assert list(real.runs["run_id"]) == ["a"] and list(synthetic.runs["run_id"]) == ["b"]


@pytest.mark.slow
def test_a_what_if_sweep_on_real_engines_accepts_as_set_and_reports_apart(tiny_overrides, tmp_path):
    overrides = [o for o in tiny_overrides if not o.startswith("pairing=")]
    grid = ["variant=cot_sd", "dataset=synth_easy", "spec.k=2",
            "spec.synthetic_acceptance_length=1,3", "warmup=0", "calibrate=false", *overrides]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "harness", "-m", *grid], capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    sweep = tmp_path / "results" / "tiny"
    for length, accepted_per_step in ((1, 0), (3, 2)):
        job = sweep / f"cot_sd-synth_easy-k2-c1-a{length}-s0-t0-n3"
        rows = pq.read_table(job / results.REQUESTS).to_pylist()
        # every answer runs to max_tokens (24), its pair too; acceptance is the one set
        assert {r["output_tokens"] for r in rows} == {24}
        assert {r["pair_output_tokens"] for r in rows} == {24}
        steps = sum(r["num_spec_steps"] for r in rows)
        assert sum(r["num_accepted_tokens"] for r in rows) == accepted_per_step * steps
        assert json.loads((job / results.SUMMARY).read_text())["synthetic_acceptance_length"] == (
            length
        )
    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, "-m", "reports", f"results_dir={tmp_path / 'results'}",
         "--out-dir", str(out)], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    surface = pd.read_csv(out / "tiny" / "whatif.csv")
    assert sorted(surface[whatif.SYNTHETIC]) == [1.0, 3.0]
    assert sorted(surface["mean_acceptance_length"]) == [1.0, 3.0]
    assert "## What-if: speedup against acceptance" in (out / "tiny" / "REPORT.md").read_text()
