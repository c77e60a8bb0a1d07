"""`python -m reports` end to end on synthetic runs: figures, REPORT.md, determinism, CLI."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess

import matplotlib.image as mpimg
import pandas as pd
import pytest

from harness import results as harness_results
from reports import figures
from reports.__main__ import add_cli_args, main
from reports.report import make_report
from tests import cli, run_fixtures

# every figure but the ones these runs have no data for (tests/test_whatif.py draws that one)
ALWAYS = {name for name, *_ in figures.REPORT_FIGURES} - {
    "speedup_vs_concurrency",
    "whatif_surface",
}
V = {x.name: x for x in run_fixtures.SEED_STUDY}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A seed-study sweep at concurrency 1 (K = 1, 3) with its calibration, plus one partial
    run directory."""
    root = tmp_path_factory.mktemp("results")
    jobs = run_fixtures.seed_study_jobs("study", ks=(1, 3), n_problems=40)
    for job in jobs:
        run_fixtures.write_job(root, job)
    run_fixtures.write_calibration(root, jobs)
    (root / "study" / "killed-job").mkdir()
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A sweep of two runs: cot at K = 0 and cot_sd at K = 2, 20 problems."""
    root = tmp_path_factory.mktemp("tiny")
    for name, k in (("cot", 0), ("cot_sd", 2)):
        job = run_fixtures.Job("tiny", V[name], "synth_easy", "easy", k, n_problems=20)
        run_fixtures.write_job(root, job)
    return root


@pytest.fixture(scope="module")
def tiny_report(tiny, tmp_path_factory):
    """:func:`tiny`'s report, made once for the tests that read it or compare another."""
    return make_report(tiny, tmp_path_factory.mktemp("tiny_report") / "a", n_boot=100)


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "study"
    return make_report(results, out, n_boot=200)


def test_every_figure_with_data_is_drawn_and_not_blank(report):
    for name in ALWAYS:
        png = report.parent / "figures" / f"{name}.png"
        assert png.is_file(), name
        pixels = mpimg.imread(png)[..., :3]
        assert pixels.std() > 0.05, name  # not an empty canvas
        assert min(pixels.shape[:2]) > 300, name


def test_a_figure_without_data_is_skipped_with_a_note(report):
    text = report.read_text()
    assert not (report.parent / "figures" / "speedup_vs_concurrency.png").exists()
    assert (
        "speedup vs concurrency**: skipped, no configuration ran closed loop at more than one concurrency"
        in text
    )


def test_report_states_tables_hypotheses_environment_and_skips(report):
    text = report.read_text()
    for section in ("## Seed hypotheses", "## Headline results", "## Analytical model vs "
                    "measurement", "## Figures", "## All configurations", "## Hardware and "
                    "software", "## Skipped run directories", "## Definitions"):  # fmt: skip
        assert section in text
    assert "### H1. Reasoning fine-tuning improves accuracy" in text
    assert text.count("| accuracy | strict / flexible |") == 2  # headline and all groups
    assert "**Verdict: supported**" in text
    assert "`killed-job`" not in text and "killed-job` | partial: no summary.json" in text
    assert "synthetic" in text  # the versions table
    for name in ALWAYS:
        assert f"](figures/{name}.png)" in text
    # the definitions live in one page, linked relative to the report
    link = re.search(r"defined in \[docs/METRICS.md\]\(([^)]+)\)", text).group(1)
    definitions = (report.parent / link).read_text()
    assert "**acceptance rate** = accepted draft tokens / proposed draft tokens" in definitions


@pytest.mark.usefixtures("unrasterized")
def test_regenerating_gives_identical_tables(tiny, tiny_report, tmp_path):
    first, again = tiny_report, make_report(tiny, tmp_path / "b", n_boot=100)
    assert again.read_text() == first.read_text()
    for csv in ("aggregates.csv", "fits.csv"):
        assert (again.parent / csv).read_bytes() == (first.parent / csv).read_bytes()


@pytest.mark.usefixtures("unrasterized")
def test_stale_figures_are_removed_when_their_data_is_gone(tiny_report, tmp_path):
    out = shutil.copytree(tiny_report.parent, tmp_path / "r")  # a report of tiny's runs
    assert (out / "figures" / "latency_cdf.png").exists()
    make_report(tmp_path / "empty", out, n_boot=50)
    assert not list((out / "figures").glob("*.png"))
    assert not (out / "aggregates.csv").exists()


@pytest.mark.usefixtures("unrasterized")
def test_partial_sweep_without_speculation_skips_those_parts(tmp_path):
    for name in ("base", "cot"):
        job = run_fixtures.Job("p", V[name], "synth_easy", "easy", 0, n_problems=30)
        run_fixtures.write_job(tmp_path / "res", job)
    text = make_report(tmp_path / "res", tmp_path / "out", n_boot=50).read_text()
    assert "Not testable with these runs: needs a draft variant at K > 0" in text
    assert "acceptance vs k**: skipped, no speculative runs (K > 0)" in text
    assert (tmp_path / "out" / "figures" / "accuracy_by_variant.png").is_file()


def _trained(root, sweeps: dict[str, int]) -> str:
    """REPORT.md of cot_sd at K = 2 beside cot in each sweep, its draft trained on
    ``sweeps[sweep]`` examples."""
    for sweep, examples in sweeps.items():
        training = {"examples": examples, "steps": examples // 2, "train_seconds": 61.0,
                    "eval_accuracy": [0.61, 0.5]}  # fmt: skip
        for name, k in (("cot", 0), ("cot_sd", 2)):
            job = run_fixtures.Job(sweep, V[name], "synth_easy", "easy", k, n_problems=20)
            recs = run_fixtures.records(job)
            models = {"models.drafts.cot": {"model": "d", "digest": "x", "training": training}}
            summary = dataclasses.replace(
                run_fixtures.summary(job, recs), models=models if k else {}
            )
            harness_results.write_job(root / "res" / sweep / job.name, recs, summary)
    return make_report(root / "res", root / "out", n_boot=50).read_text()


def test_a_speculator_trained_on_several_sets_is_shown_against_them(tmp_path):
    text = _trained(tmp_path, {"a3000": 3000, "a200": 200})
    section = text.split("## Speculators against their training data")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| a")]
    assert [r[:3] for r in rows] == [
        ["| a200/cot_sd", "200", "100"],
        ["| a3000/cot_sd", "3,000", "1,500"],
    ]
    assert all(r[3:6] == ["61", "0.61 / 0.50", "2"] for r in rows)


def test_one_training_set_per_speculator_shows_no_training_section(tmp_path):
    assert "training data" not in _trained(tmp_path, {"a": 200, "b": 200})


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    return main(parser.parse_args(argv))


def test_cli_without_results_says_so_and_exits_zero(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = _run(["--results-dir", str(tmp_path / "empty"), "--out-dir", str(tmp_path / "o")])
    assert code == 0
    out = capsys.readouterr().out
    assert "No complete runs found" in out
    assert (tmp_path / "o" / "all" / "REPORT.md").is_file()


@pytest.mark.usefixtures("unrasterized")
def test_cli_names_the_report_after_its_sweeps(tiny, tmp_path, capsys):
    code = _run(["--results-dir", str(tiny), "--sweep", "tiny", "--out-dir", str(tmp_path),
                 "--bootstrap", "50"])  # fmt: skip
    assert code == 0 and (tmp_path / "tiny" / "REPORT.md").is_file()
    assert "runs from 1 sweep(s)" in capsys.readouterr().out


def test_cli_unknown_sweep_is_one_error_line(results, tmp_path, capsys):
    code = _run(["--results-dir", str(results), "--sweep", "nope", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "sweep 'nope' not found" in err and "study" in err


def _cli(*args: str) -> subprocess.CompletedProcess:
    return cli.run("reports", *args)


def test_cli_missing_results_dir_is_one_error_line(tmp_path):
    run = _cli("--results-dir", str(tmp_path / "typo"), "--out-dir", str(tmp_path / "o"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"error: --results-dir={tmp_path / 'typo'}: no such directory"
    ]
    assert not (tmp_path / "o").exists()


@pytest.mark.usefixtures("unrasterized")
def test_cli_prints_runs_skipped_as_corrupt(tiny, tmp_path, capsys):
    root = shutil.copytree(tiny, tmp_path / "results")
    (root / "tiny" / "killed-job").mkdir()
    skipped = f"skipped {root / 'tiny' / 'killed-job'}: partial: no summary.json"
    code = _run(["--results-dir", str(root), "--out-dir", str(tmp_path / "o"),
                 "--bootstrap", "20"])  # fmt: skip
    assert code == 0 and skipped in capsys.readouterr().err
    # --strict: a report that left a run out says so in its exit status; so does an empty one
    out = tmp_path / "strict"
    strict = _cli("--results-dir", str(root), "--out-dir", str(out), "--bootstrap", "20",
                  "--strict")  # fmt: skip
    assert strict.returncode == 1 and skipped in strict.stderr
    report = out / "all" / "REPORT.md"
    assert f"error: {report}: 1 run(s) skipped (--strict)" in strict.stderr and report.is_file()
    (root / "tiny" / "killed-job").rmdir()
    assert _run(["--results-dir", str(root), "--out-dir", str(out), "--bootstrap", "20",
                 "--strict"]) == 0  # fmt: skip
    (tmp_path / "none").mkdir()
    empty = _cli("--results-dir", str(tmp_path / "none"), "--out-dir", str(out), "--strict")
    assert empty.returncode == 1 and "no runs (--strict)" in empty.stderr


def test_cli_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        _run(["--help"])
    assert exit_.value.code == 0
    assert "--results-dir" in capsys.readouterr().out


@pytest.mark.usefixtures("unrasterized")
def test_counter_mismatches_and_lossy_runs_reach_the_report(tiny, tiny_report, tmp_path):
    root = shutil.copytree(tiny, tmp_path / "res")
    spec = run_fixtures.Job("tiny", V["cot_sd"], "synth_easy", "easy", 2, n_problems=20)
    recs = run_fixtures.records(spec)
    lossy = ["changed"] * 10 + [r.output_hash for r in recs[10:]]
    job = run_fixtures.write_job(root, spec, run_fixtures.with_columns(recs, output_hash=lossy))
    summary = json.loads((job / "summary.json").read_text())
    (job / "summary.json").write_text(json.dumps({**summary, "counter_mismatch": "off by 2"}))
    text = make_report(root, tmp_path / "m", n_boot=50).read_text()
    assert f"counter mismatch in `{job.name}`: off by 2" in text
    assert f"`{job.name}`: only 0.500 of outputs equal the target's own" in text
    clean = tiny_report.read_text()
    assert "of outputs equal the target's own" not in clean
    assert "| lossless |" in clean and "| 1.000 |" in clean


def test_cli_given_a_sweeps_overrides_reports_only_the_runs_that_sweep_wrote(tiny, tmp_path):
    """`make sweep ARGS=...` hands its overrides to the report: results_dir and the sweep
    name of the experiment (smollm2 here), not results/ and not the other sweep."""
    root = shutil.copytree(tiny, tmp_path / "elsewhere")
    for name, k in (("cot", 0), ("cot_sd", 2)):
        job = run_fixtures.Job("smollm2", V[name], "synth_easy", "easy", k, n_problems=20)
        run_fixtures.write_job(root, job)
    out = tmp_path / "o"
    run = _cli(f"results_dir={root}", "experiment=smollm2", "variant=cot,cot_sd", "spec.k=0,2",
               "--out-dir", str(out), "--bootstrap", "20")  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"wrote {out / 'smollm2' / 'REPORT.md'}" in run.stdout
    assert "runs from 1 sweep(s)" in run.stdout


def test_cli_sweep_overrides_and_sweep_options_together_are_one_error(tiny, tmp_path, capsys):
    code = _run(["--sweep", "tiny", f"results_dir={tiny}", "--out-dir", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: give --results-dir/--sweep or harness overrides, not both"
    )


@pytest.mark.usefixtures("unrasterized")
def test_cli_slo_overrides_set_the_bounds_goodput_counts(tiny, tmp_path, capsys):
    goodput = {}
    for bound in ("1e9", "1e-6"):  # every request meets it, none does
        out = tmp_path / bound
        code = _run(["--sweep", "tiny", "--results-dir", str(tiny), "--out-dir", str(out),
                     "--bootstrap", "20", f"slo.e2e_ms={bound}"])  # fmt: skip
        assert code == 0
        table = pd.read_csv(out / "tiny" / "aggregates.csv")
        assert set(table["slo"]) == {f"e2e {float(bound):g}"}
        goodput[bound] = table.set_index("k")["goodput"]
    runs = pd.DataFrame([json.loads(p.read_text()) for p in tiny.glob("tiny/*/summary.json")])
    every = runs.set_index("k")["num_requests"] / runs.set_index("k")["wall_s"]
    assert dict(goodput["1e9"]) == pytest.approx(dict(every), rel=1e-5)  # CSV: 6 digits
    assert (goodput["1e-6"] == 0).all()
    for bad, why in (("slo.tpot=5", "slo.tpot: unknown bound"),
                     ("slo.tpot_ms=-5", "slo.tpot_ms=-5.0: must be > 0 or null"),
                     ("slo.tpot_ms=fast", "slo.tpot_ms=fast: must be a number of ms or null")):  # fmt: skip
        assert _run(["--results-dir", str(tiny), "--out-dir", str(tmp_path), bad]) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {why}")
