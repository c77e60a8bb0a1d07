"""bench/gpu_check.py (``make gpu-check``): one line without a GPU; the verdict of each row."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from bench import gpu_check
from harness import metrics
from harness.measure import preflight
from reports import load, tables
from tests import cli, run_fixtures

ROOT = Path(__file__).resolve().parent.parent


def test_without_a_gpu_the_check_says_so_in_one_line_and_exits_0():
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no nvidia-smi on it
    done = cli.run("bench.gpu_check", cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: no NVIDIA GPU here (nvidia-smi not found); nothing to check"
    ]


def test_a_bad_tolerance_is_refused_in_one_line():
    done = cli.run("bench.gpu_check", "--tolerance", "2", cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --tolerance=2.0: give a share between 0 and 1"
    ]


def _row(variant: str, **values: object) -> dict[str, object]:
    """A K = 3 row of the report's table, as it should be unless ``values`` say otherwise."""
    return {
        "variant": variant, "k": 3, "temperature": 0.0, "draft": "models/tiny/draft_cot",
        "lossless_fraction": 1.0, "acceptance_rate": 0.86, "acceptance_preflight": 0.85,
        "speedup_tpot": 1.3, "speedup_tpot_lo": 1.2, "speedup_tpot_hi": 1.4,
        "num_failed": 0, "num_missing": 0, **values,
    }  # fmt: skip


def _verdicts(*rows: dict[str, object], tolerance: float = 0.05) -> pd.Series:
    table = pd.DataFrame(list(rows))
    out = gpu_check.verdicts(table, tolerance, expected=[r["variant"] for r in rows], k=3)
    return out.set_index("speculator")["problem"]


def test_a_row_as_it_should_be_passes():
    assert _verdicts(_row("cot_sd"))["cot_sd"] == ""


def test_a_speculator_that_is_not_lossless_at_temperature_0_fails():
    problems = _verdicts(_row("cot_sd"), _row("cot_eagle3", lossless_fraction=0.9))
    assert problems["cot_sd"] == ""
    assert "not lossless" in problems["cot_eagle3"] and "0.900" in problems["cot_eagle3"]


def test_losslessness_is_asked_only_at_temperature_0():
    sampled = _row("cot_sd", temperature=0.7, lossless_fraction=float("nan"))
    assert _verdicts(sampled)["cot_sd"] == ""
    assert "not lossless" in _verdicts(_row("cot_sd", lossless_fraction=float("nan")))["cot_sd"]


def test_acceptance_beyond_the_tolerance_from_the_preflight_fails():
    near = _row("cot_sd", acceptance_rate=0.80, acceptance_preflight=0.84)
    far = _row("cot_eagle3", acceptance_rate=0.80, acceptance_preflight=0.86)
    problems = _verdicts(near, far, tolerance=0.05)
    assert problems["cot_sd"] == ""
    assert "pre-flight" in problems["cot_eagle3"]
    assert _verdicts(far, tolerance=0.1)["cot_eagle3"] == ""


def test_a_draft_without_a_preflight_fails_but_a_model_free_speculator_needs_none():
    problems = _verdicts(
        _row("cot_sd", acceptance_preflight=float("nan")),
        _row("cot_ngram", draft=load.NO_DRAFT, acceptance_preflight=float("nan")),
    )
    assert problems["cot_sd"] == "no pre-flight acceptance"
    assert problems["cot_ngram"] == ""


def test_a_speculator_with_no_run_or_failed_requests_fails():
    table = pd.DataFrame([_row("cot_sd", num_failed=2)])
    out = gpu_check.verdicts(table, expected=["cot_sd", "cot_suffix"], k=3)
    problems = out.set_index("speculator")["problem"]
    assert "2 request(s) failed" in problems["cot_sd"]
    assert problems["cot_suffix"].startswith("no K = 3 run")
    rendered = gpu_check.render(out)
    assert rendered.count("\n") == len(out) + 1  # one table: a header, a rule, a line a row
    assert "| cot_suffix | – |" in rendered


def test_the_report_tables_carry_every_column_the_verdict_reads(tmp_path):
    """Runs written by the harness's writer, a pre-flight file beside the K = 0 run: the
    verdict reads lossless, acceptance, the pre-flight and the speedup from them."""
    v = {x.name: x for x in run_fixtures.SEED_STUDY}
    plain = run_fixtures.write_job(
        tmp_path, run_fixtures.Job("s", v["cot"], "synth_easy", "easy", 0)
    )
    run_fixtures.write_job(tmp_path, run_fixtures.Job("s", v["cot_sd"], "synth_easy", "easy", 3))
    counts = metrics.SpecCounts(num_steps=100, num_draft_tokens=300, num_accepted_tokens=150,
                                accepted_per_pos=(70, 50, 30))  # fmt: skip
    preflight.write(plain, v["cot_sd"].draft_model, {"ks": {"3": counts.to_row()}})
    table = tables.build_tables(load.load(tmp_path), n_boot=50).table
    out = gpu_check.verdicts(table, tolerance=1.0, expected=["cot_sd"], k=3).iloc[0]
    assert out["lossless"] and out["problem"] == ""
    assert out["acceptance_preflight"] == 0.5
    assert 0 < out["acceptance"] < 1 and out["speedup_tpot_lo"] <= out["speedup_tpot"]
